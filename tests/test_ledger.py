"""conch.ledger's own rules, on files: git's rule for a file whose metadata changed (its content decides), the
"racy git" rule for a file modified within the clock tick of the moment its state was taken, and folders."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from conch import ledger


def _entry(path: Path, kind: str = "f", seen_ns: int | None = None) -> list[object]:
    seen = time.time_ns() + ledger.COARSE_MARGIN_NS if seen_ns is None else seen_ns
    return ledger._entry(str(path), kind, {}, seen, frozenset({"helper", "__init__"}))


def _holds(entry: list[object]) -> bool:
    return ledger._holds(entry, frozenset({"helper", "__init__"}))[0]


def test_a_touched_file_holds_by_content_and_an_edited_one_does_not(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_text("one\n")
    old = time.time() - 60
    os.utime(path, (old, old))
    entry = _entry(path)
    assert entry[7] is True and _holds(entry)  # settled: trusted by its metadata
    os.utime(path)
    holds, anew = ledger._holds(entry, frozenset())
    assert holds and anew is not None and anew[4] == path.stat().st_mtime_ns  # same content, new metadata kept
    path.write_text("two\n")
    assert not _holds(entry)


def test_a_file_rewritten_within_the_same_tick_is_compared_by_content(tmp_path: Path) -> None:
    """The racy case: same size, same mtime, same inode, other content. A state taken within the margin of the
    file's mtime is not trusted by its metadata."""
    path = tmp_path / "racy.txt"
    path.write_text("aaaa\n")
    entry = _entry(path)  # just written: not settled
    assert entry[7] is False and entry[6] is not None
    st = path.stat()
    with open(path, "r+") as fh:  # in place: the inode stays
        fh.write("bbbb\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert [path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino] == entry[3:6]
    assert not _holds(entry)


def test_a_file_written_after_the_build_started_is_not_trusted_at_all(tmp_path: Path) -> None:
    path = tmp_path / "late.txt"
    path.write_text("late\n")
    entry = _entry(path, seen_ns=time.time_ns() - 10**9)  # the build started a second before it was written
    assert entry[6] is None and not _holds(entry)


def test_a_missing_file_holds_while_it_stays_missing(tmp_path: Path) -> None:
    entry = _entry(tmp_path / "helper.py")
    assert _holds(entry)
    (tmp_path / "helper.py").write_text("x = 1\n")
    assert not _holds(entry)


def test_a_searched_folder_changes_only_with_names_that_could_be_imported(tmp_path: Path) -> None:
    old = time.time() - 60
    os.utime(tmp_path, (old, old))
    entry = _entry(tmp_path, "m")
    (tmp_path / "notes.txt").write_text("not a module\n")
    assert _holds(entry)
    (tmp_path / "helper").mkdir()
    assert not _holds(entry)
    listed = _entry(tmp_path, "l", seen_ns=time.time_ns() + ledger.COARSE_MARGIN_NS)
    (tmp_path / "more.txt").write_text("any name\n")
    assert not _holds(listed)


def test_only_the_last_ledgers_are_kept(tmp_path: Path) -> None:
    for index in range(ledger.KEPT + 3):
        (tmp_path / f"{index:03d}.json").write_text("{}")
        os.utime(tmp_path / f"{index:03d}.json", ns=(index * 10**9, index * 10**9))
    ledger._prune(tmp_path)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert len(kept) == ledger.KEPT and kept[0] == "003.json"


def test_a_folder_the_import_system_searches_is_told_from_one_the_build_lists(tmp_path: Path) -> None:
    """An import's listing keeps only the names that could be the modules imported; the build's own listing
    (discovering ensemble files) keeps every name."""
    searched, listed = tmp_path / "searched", tmp_path / "listed"
    searched.mkdir()
    listed.mkdir()
    (searched / "ledger_probe_module.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(searched))
    ledger.start(["build", "probe"])
    try:
        import ledger_probe_module  # noqa: F401

        os.listdir(listed)
        trace = ledger._trace
        assert trace is not None
        assert str(searched) in trace.searched and str(searched) not in trace.listed
        assert str(listed) in trace.listed and "ledger_probe_module" in trace.names
    finally:
        ledger.stop()
        sys.path.remove(str(searched))
        sys.modules.pop("ledger_probe_module", None)


def test_a_worker_sends_each_item_once_and_only_a_doubt_for_a_job_that_wrote_its_archive(tmp_path: Path) -> None:
    """A forked worker's outcomes carry what it touched since its last outcome (the recording process keeps the
    union); a job that wrote its archive carries only that (such a command keeps no ledger)."""
    data = tmp_path / "data.txt"
    data.write_text("x\n")
    ledger.start(["build", "probe"])
    trace = ledger._trace
    assert trace is not None
    trace.pid = -1  # as in a forked worker: not the recording process
    try:
        data.read_text()
        first = ledger.traced()
        assert first is not None and ("read", str(data)) in first
        assert any(kind == "module" for kind, _ in first)
        again = ledger.traced()
        assert again is not None and ("read", str(data)) not in again
        assert not any(kind == "module" for kind, _ in again)
        assert ledger.traced(wrote=True) == (("doubt", "an archive was written"),)
    finally:
        ledger.stop()
        ledger._sent.clear()
