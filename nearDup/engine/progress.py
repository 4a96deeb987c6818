"""Progress bars and counters on stderr, drawn only when it is a terminal (tqdm)."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass



class _NoBar:
    def done(self, task: int, result) -> None:
        pass

    def settle(self, count: int) -> None:
        pass

    def close(self) -> None:
        pass


# tqdm's default line without its own rate, which would repeat one of ours ({postfix} begins with ", ")
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"


class _Bar:
    """A tqdm bar over the tasks' sizes whose postfix gives the documents/s and MB/s since the stage began.

    Redrawn at every finished task (mininterval 0): tasks are whole partitions, at most a few thousand a stage, so
    the rates show even when a stage takes less than tqdm's usual 0.1 s between redraws."""

    def __init__(self, desc: str, sizes, unit: str, count: int | None, docs, nbytes):
        from tqdm import tqdm

        self.sizes, self.docs, self.nbytes = sizes, docs, nbytes
        self.done_docs = self.done_bytes = 0
        self.counts_docs = docs is not None
        self.start = time.monotonic()
        self.count = count
        self.bar = tqdm(total=self._total(count), desc=desc, unit=unit, unit_scale=sizes is not None,
                        file=sys.stderr, leave=False, mininterval=0, miniters=1, bar_format=BAR_FORMAT)

    def _total(self, count: int | None) -> int | None:
        return None if count is None else sum(self.sizes) if self.sizes is not None else count

    def settle(self, count: int) -> None:
        """A stream of tasks has ended: the bar gets its total."""
        if self.count is None:
            self.count, self.bar.total = count, self._total(count)
            self.bar.refresh()

    def done(self, task: int, result) -> None:
        counted = getattr(result, "docs", result)  # an int, or a result that carries its documents
        if self.docs is not None:
            self.done_docs += self.docs[task]
        elif isinstance(counted, int) and not isinstance(counted, bool):
            self.done_docs += counted
            self.counts_docs = True
        if self.nbytes is not None:
            self.done_bytes += self.nbytes[task]
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rates = []
        if self.counts_docs:
            rates.append(f"{self.done_docs / elapsed:,.0f} docs/s")
        if self.nbytes is not None:
            rates.append(f"{self.done_bytes / elapsed / 1e6:,.1f} MB/s")
        step = self.sizes[task] if self.sizes else 1
        if not rates:  # neither documents nor bytes (verify: candidate pairs): the bar's own unit
            rates.append(f"{(self.bar.n + step) / elapsed:,.0f} {self.bar.unit}/s")
        self.bar.set_postfix_str(", ".join(rates), refresh=False)
        self.bar.update(step)

    def close(self) -> None:
        self.bar.close()


COUNT_EVERY = 1024  # items between redraws of a counter: a plain add and test per item, not a call


def counter(enabled: bool, desc: str, unit: str) -> Callable[..., Iterator] | None:
    """A wrapper of an iterator (of files being listed) that shows how many items went by so far, on stderr, or
    None when progress is off (no wrapper, no cost)."""
    if not enabled:
        return None

    def counted(items: Iterable, size: Callable[[Any], int] | None = None) -> Iterator:
        """items, counted as they go by: one each, or size(item) each (a run of files)."""
        from tqdm import tqdm

        bar = tqdm(desc=desc, unit=f"{unit}s", total=None, file=sys.stderr, leave=False, mininterval=0.2,
                   bar_format="{desc}: {n} {unit} found [{elapsed}]")
        pending = 0
        try:
            for item in items:
                yield item
                pending += 1 if size is None else size(item)
                if pending >= COUNT_EVERY:
                    bar.update(pending)
                    pending = 0
            bar.update(pending)
            bar.refresh()  # the final count, however soon it came
        finally:
            bar.close()
    return counted


def _progress_bar(enabled: bool, desc: str, sizes, unit: str, count: int | None, docs=None, nbytes=None):
    if not enabled or count == 0:  # None: a stream, count unknown
        return _NoBar()
    return _Bar(desc, sizes, unit, count, docs, nbytes)
