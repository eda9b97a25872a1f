"""A progress bar for long commands that stays quiet (one line per update) without a terminal."""

from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(stream, description: str, total: int | None):
    console = Console(file=stream, force_terminal=None)
    if not console.is_terminal:
        def update(done: int, detail: str = "", *, of: int | None = None) -> None:
            shown = of if of is not None else total
            stream.write(f"{description}: {done}/{shown if shown is not None else '?'} {detail}\n")
            stream.flush()

        yield update
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[detail]}"), TimeElapsedColumn()]
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(description, total=total, detail="")

        def update(done: int, detail: str = "", *, of: int | None = None) -> None:
            bar.update(task, completed=done, detail=detail, **({"total": of} if of is not None else {}))

        yield update
