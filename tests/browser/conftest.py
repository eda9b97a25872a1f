"""Headless Chromium (Debian's chromium + chromedriver, installed by `make test` through
scripts/services.sh) driving the admin on pytest-django's live server."""

import shutil
import tempfile

import pytest

from harness.paths import ARTIFACTS
from harness.waiting import wait_until

SCREENSHOTS = ARTIFACTS / "screenshots"
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
)


@pytest.fixture(scope="session")
def chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium_path, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium_path and driver_path):
        pytest.fail("chromium and chromedriver are missing: run scripts/services.sh chromium (make test does)")
    profile = tempfile.mkdtemp(prefix="dp-chromium-")
    options = Options()
    options.binary_location = chromium_path
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)  # a given driver: no download
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


class Browser:
    """The few things the admin tests do with a page, by what a person sees."""

    def __init__(self, driver, base_url: str):
        self.driver, self.base_url = driver, base_url

    def open(self, path: str) -> "Browser":
        self.driver.get(self.base_url + path)
        return self

    def login(self, username: str, password: str) -> None:
        self.driver.delete_all_cookies()
        self.open("/admin/login/")
        self.fill(username=username, password=password)
        self.submit()
        assert "Log out" in self.text() or "log out" in self.text().lower(), self.text()[:500]

    def find(self, css: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def fill(self, **fields) -> None:
        from selenium.webdriver.support.select import Select

        for name, value in fields.items():
            element = self.find(f'[name="{name}"]')
            if element.tag_name == "select":
                Select(element).select_by_value(str(value))
            elif element.get_attribute("type") == "checkbox":
                if element.is_selected() != bool(value):
                    element.click()
            else:
                element.clear()
                element.send_keys(str(value))

    def click(self, element) -> None:
        """Click something that loads a page, and wait until the new page is there."""
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.wait import WebDriverWait

        old = self.find("html")
        element.click()
        WebDriverWait(self.driver, 20).until(expected_conditions.staleness_of(old))

    def submit(self, css: str = 'input[type="submit"], button[type="submit"]') -> None:
        self.click(self.find(css))

    def click_link(self, text: str) -> None:
        from selenium.webdriver.common.by import By

        self.click(self.driver.find_element(By.LINK_TEXT, text))

    def text(self) -> str:
        return self.find("body").text

    def messages(self) -> list[str]:
        return [li.text for li in self.find_all("ul.messagelist li")]

    def reload_until(self, predicate, timeout: float, message: str):
        def check():
            self.driver.refresh()
            return predicate()

        return wait_until(check, timeout, 0.5, message)

    def screenshot(self, name: str) -> None:
        """The whole page: the window grows to the page's height (plus the browser's own frame)."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        height, frame = self.driver.execute_script(
            "return [Math.max(document.documentElement.scrollHeight, document.body.scrollHeight),"
            " window.outerHeight - window.innerHeight]"
        )
        self.driver.set_window_size(1400, min(height, 6000) + frame)
        self.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
        self.driver.set_window_size(1400, 1000)


@pytest.fixture
def browser(chromium, live_server):
    return Browser(chromium, live_server.url)


@pytest.fixture
def staff_member(django_user_model):
    """staff_member(team) -> the staff user ``bea`` (password ``pw``), a member of that team."""
    from scheduling.models.teams import Membership

    def make(team):
        user = django_user_model.objects.create_user("bea", password="pw", is_staff=True)
        Membership.objects.create(team=team, user=user, role="member")
        return user

    return make


@pytest.fixture
def endpoint_queues(amqp):
    """The endpoints' queues a test's services declared on the broker: deleted after it."""
    from scheduling.models import Endpoint

    yield
    for endpoint in Endpoint.objects.all():
        amqp.delete_queue(endpoint.queue)
