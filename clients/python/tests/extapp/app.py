import os

from celery import Celery

from delayclient.celery import PlatformTask, platform_queue, team_worker_settings

app = Celery("extapp", broker=os.environ["EXTAPP_BROKER_URL"], task_cls=PlatformTask, include=["extapp.tasks"])
app.conf.update(
    delay_platform={"endpoint": os.environ["EXTAPP_ENDPOINT"], "threshold_seconds": 1},  # url, key: environment
    task_queues=[platform_queue(os.environ["EXTAPP_QUEUE"])],
    task_default_queue=os.environ["EXTAPP_QUEUE"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
if os.environ.get("EXTAPP_TEAM"):  # connecting with the team's own broker user (team_broker_user)
    app.conf.update(team_worker_settings(os.environ["EXTAPP_TEAM"]))
