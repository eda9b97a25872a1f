"""Two ways the docs drifted from the truth, checked on every page (docs/ and README.md):

- **A figure has one home.** `make bench`'s measured figures live in docs/operations/performance.md
  (and, for earlier runs, performance-history.md). A passage elsewhere that cites the benchmark (names
  `make bench` or `bench.suite`, or links to the performance page) may quote a figure only if that
  page holds it: a copy made from an older run, or a case renumbered since, fails here. Better, it
  links to the row and quotes nothing.
- **Roles and scopes decide, not model permissions.** Since teams, what a user or key may do is the
  team's role or the key's scope (docs/guides/teams.md); Django's model permissions grant nothing. No
  page may tell a user that a model permission (``scheduling.change_endpoint``, ``pause_schedule``)
  is what they need.
"""

import re
from pathlib import Path

from harness.paths import ROOT

DOCS = ROOT / "docs"
PERFORMANCE = DOCS / "operations" / "performance.md"
HISTORY = DOCS / "operations" / "performance-history.md"

NUMBER = r"\d[\d,]*(?:\.\d+)?"
# a measured quantity: a duration, a CPU cost, a size or a rate ("2,500/s", "435 tasks/s"), or a range of them
FIGURE = re.compile(rf"(?<![\w.,/–-])({NUMBER})(?:\s?[–-]\s?({NUMBER}))?\s?(?:ms|µs|MB|KiB|s|[a-z]*/s)(?![\w/])")
CITES_BENCH = re.compile(r"make bench(?![-\w])|bench\.suite|performance\.md")
CITES_HISTORY = re.compile(r"performance-history\.md")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if p not in (PERFORMANCE, HISTORY))]


def passages(text: str) -> list[str]:
    """A page's paragraphs, list items and table rows (each alone: they cite apart), code left out."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found = []
    for block in re.split(r"\n\s*\n", text):
        rows = [line for line in block.splitlines() if line.lstrip().startswith("|")]
        found.extend(rows or re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", block))
    return found


def numbers_in(text: str) -> set[str]:
    return {n.replace(",", "") for n in re.findall(NUMBER, text)}


def figures_not_at_home(passage: str, home: set[str], history: set[str]) -> list[str]:
    """The figures a passage that cites the benchmark quotes which its home does not hold (the
    history counts where the passage links to it)."""
    if not CITES_BENCH.search(passage):
        return []
    held = home | history if CITES_HISTORY.search(passage) else home
    quoted = [n for match in FIGURE.finditer(passage) for n in match.groups() if n]
    return [n for n in quoted if n.replace(",", "") not in held]


def test_a_page_quotes_only_figures_the_performance_page_holds():
    home, history = numbers_in(PERFORMANCE.read_text()), numbers_in(HISTORY.read_text())
    strays = []
    for page in pages():
        for passage in passages(page.read_text()):
            strays += [f"{page.relative_to(ROOT)}: {n} in {passage.strip()[:100]!r}"
                       for n in figures_not_at_home(passage, home, history)]
    assert not strays, "figures not in docs/operations/performance.md (link to its row instead):\n" + "\n".join(strays)


def test_the_figure_check_finds_a_copy_from_another_run():
    home = numbers_in("| 3 rate | ... | **22,857/s** (20,227–23,966) |")
    assert figures_not_at_home("It schedules 22,857/s ([Performance](performance.md)).", home, set()) == []
    assert figures_not_at_home("About 6,493 messages/s (`make bench`, case 3).", home, set()) == ["6,493"]
    assert figures_not_at_home("13,000–16,500 messages/s through `make bench`", home, set()) == ["13,000", "16,500"]
    # a passage that does not cite the benchmark is not a copy of it (a setting, a test's own load)
    assert figures_not_at_home("`max_deliveries_per_second` 500/s hands over about 467 a second", home, set()) == []
    # each list item and table row is a passage of its own: a neighbour's citation does not reach it
    assert passages("- a 1.5 s margin\n- 22,857/s (`make bench`)\n\n| a | 2 ms |\n| b | 3 ms |") == [
        "- a 1.5 s margin", "- 22,857/s (`make bench`)", "| a | 2 ms |", "| b | 3 ms |"]
    # a figure of an earlier run, linked to the history, is at home there
    assert figures_not_at_home("6,493/s ([history](performance-history.md#x), `make bench`)", home, {"6493"}) == []


# --- roles and scopes, not model permissions ---------------------------------------------------------

NEGATED = re.compile(r"\b(nothing|not|never|no longer|instead of|rather than)\b", re.I)
CLAIMS = re.compile(r"\b(needs?|requires?|required|grants?|granted|decides?|allow(s|ed)?|may|can|permission to)\b",
                    re.I)


def permission_names() -> set[str]:
    """Every model permission of the platform's app: Django's four per model and the ones declared."""
    from django.apps import apps

    names = set()
    for model in apps.get_app_config("scheduling").get_models():
        names |= {f"{action}_{model._meta.model_name}" for action in model._meta.default_permissions}
        names |= {codename for codename, _ in model._meta.permissions}
    return names


def sentences(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [s for s in re.split(r"(?<=[.!?])\s+|\n\s*\n|\n\|", text) if s.strip()]


def permission_claims(text: str, names: set[str]) -> list[str]:
    """Sentences that say a model permission (by name, or "model permission") decides something,
    without saying it does not."""
    named = re.compile(r"(?<![\w.])(?:scheduling\.)?(" + "|".join(sorted(names)) + r")\b|model permissions?", re.I)
    return [s.strip() for s in sentences(text) if named.search(s) and CLAIMS.search(s) and not NEGATED.search(s)]


def test_no_page_says_a_model_permission_decides_what_roles_and_scopes_decide():
    names = permission_names()
    claims = [f"{page.relative_to(ROOT)}: {claim[:160]!r}" for page in pages()
              for claim in permission_claims(page.read_text(), names)]
    assert not claims, "a model permission named as what decides (the team's role or the key's scope does):\n" + \
        "\n".join(claims)


def test_the_permission_check_finds_the_old_wording():
    names = permission_names()
    assert {"change_endpoint", "pause_schedule", "delete_schedule"} <= names
    old = "Rotating a secret needs the model permission `scheduling.change_endpoint`."
    assert permission_claims(old, names) == [old]
    assert permission_claims("Pausing needs `pause_schedule`.", names) == ["Pausing needs `pause_schedule`."]
    assert permission_claims("Django's model permissions grant nothing here.", names) == []
    assert permission_claims("Rotating a secret needs the team's `admin` role.", names) == []


# --- the code's pointers into the docs -----------------------------------------------------------------

DOC_PATH = re.compile(r"docs/[A-Za-z0-9_./-]+\.(?:md|yml|json)")
SOURCES = ("*.py", "*.sh", "*.yml", "*.yaml", "*.toml", "*.html", "*.txt", "Makefile", "Dockerfile")
NOT_SOURCES = {".venv", "site", "artifacts", "node_modules", ".git"}


def test_every_docs_path_the_code_names_exists():
    """A comment or help text pointing at a page that moved sends a reader nowhere (four did)."""
    named = set()
    for pattern in SOURCES:
        for path in ROOT.rglob(pattern):
            if NOT_SOURCES.isdisjoint(path.relative_to(ROOT).parts) and path.is_file():
                named |= {(str(path.relative_to(ROOT)), found) for found in DOC_PATH.findall(path.read_text(errors="replace"))}
    assert named, "the search found no pointer at all: its pattern is wrong"
    gone = sorted(f"{source}: {target}" for source, target in named if not (ROOT / target).exists())
    assert not gone, "docs paths that do not exist:\n" + "\n".join(gone)
