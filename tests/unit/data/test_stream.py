"""Streaming prep's parts, without sentencepiece: the chunked reader, duplicate hashes, the
reservoir sample and the streamed .npy writer."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pytest

from mtkit import fileio
from mtkit.data import stream
from mtkit.data.dedup import SeenPairs, pair_hashes
from mtkit.data.reservoir import Reservoir
from mtkit.data.store import SideWriter, ids_path, offsets_path
from mtkit.errors import DataError
from mtkit.fileio import InvalidUtf8

TEXTS = [b"", b"\n", b"a\nb\n", b"a\nb", b"a\n\n", b"\n\n\n", b"  a\xe2\x80\xa8b \r\n\n c\tc\n",
         b"x\xff\ny\n\xc3\x28 z", "gr\u00fc\u00dfe \u00e9t\u00e9\nzw\u00f6lf\n".encode() * 9]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("gz", [False, True])
def test_blocks_follow_the_reading_rules_at_any_block_size(text: bytes, gz: bool, tmp_path: Path,
                                                           monkeypatch) -> None:
    """Lines split on \\n only, stripped, bad UTF-8 replaced and counted, final newline ends
    the last line: the same lines whether a block holds 3 bytes (cutting through lines and
    multi-byte characters) or the whole file."""
    path = tmp_path / "f"
    path.write_bytes(gzip.compress(text) if gz else text)
    raw = text.split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    expected = [b.decode("utf-8", errors="replace").strip() for b in raw]
    bad = sum(b.decode("utf-8", errors="replace").encode() != b for b in raw)
    for block in (3, 1 << 22):
        monkeypatch.setattr(fileio, "_BLOCK", block)
        invalid = InvalidUtf8(str(path))
        assert [line for b in stream.read_blocks(path, invalid) for line in b] == expected
        assert invalid.lines == bad
        if bad:
            first_bad = next(i for i, b in enumerate(raw, 1)
                             if b.decode("utf-8", errors="replace").encode() != b)
            assert invalid.first == first_bad


@pytest.mark.parametrize("text", [b"\xef\xbb\xbfa b\nc\n", b"\xef\xbb\xbfab", b"\xef\xbb\xbf",
                                  b"a\n\xef\xbb\xbfb\n", b"\xef\xbb\xbf\nb\n"])
def test_a_byte_order_mark_that_starts_a_file_is_dropped_by_every_reader(text: bytes,
                                                                         tmp_path: Path,
                                                                         monkeypatch) -> None:
    """A Windows editor's BOM joined the first word ('\ufeffa'), and a gold file's first
    link ('\ufeff0-0') was refused; one inside the text is text."""
    path = tmp_path / "f"
    path.write_bytes(text)
    body = text.removeprefix(b"\xef\xbb\xbf").decode()
    want = body.split("\n")[:-1] if body.endswith("\n") else body.split("\n") if body else []
    for block in (2, 1 << 22):
        monkeypatch.setattr(fileio, "_BLOCK", block)
        assert fileio.read_lines(path) == want
    assert list(fileio.decode_lines(io.BytesIO(text), InvalidUtf8("f"))) == want
    from mtkit.score.metrics import read_text  # splits the lines itself

    if want:
        assert list(read_text(path).lines) == want
    else:
        with pytest.raises(DataError, match="file is empty"):
            read_text(path)


def test_pairs_come_in_aligned_chunks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fileio, "_BLOCK", 5)
    (tmp_path / "s").write_text("".join(f"s{i}\n" for i in range(23)))
    (tmp_path / "t").write_text("".join(f"t{i}\n" for i in range(23)))
    chunks = list(stream.read_pairs(tmp_path / "s", tmp_path / "t", {}, chunk=10))
    assert [len(s) for s, _ in chunks] == [10, 10, 3]
    assert [x for s, _ in chunks for x in s] == [f"s{i}" for i in range(23)]
    assert [x for _, t in chunks for x in t] == [f"t{i}" for i in range(23)]


def test_differing_line_counts_name_both_files_with_full_counts(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("a\n" * 25)
    (tmp_path / "t").write_text("b\n" * 12)
    with pytest.raises(DataError) as e:
        list(stream.read_pairs(tmp_path / "s", tmp_path / "t", {}, chunk=10))
    assert str(e.value) == (f"line counts differ: {tmp_path / 's'} has 25 lines, "
                            f"{tmp_path / 't'} has 12; expected one target line per source line")


def test_a_corrupt_gzip_file_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"hello\n" * 1000)[:-30] + b"garbage" * 5)
    with pytest.raises(DataError, match=r"x\.gz: cannot read"):
        list(stream.read_blocks(path, InvalidUtf8(str(path))))


def test_seen_pairs_find_duplicates_across_and_within_chunks() -> None:
    rng = np.random.default_rng(0)
    seen, reference = SeenPairs(), set()
    for _ in range(300):
        hashes = rng.integers(0, 4000, size=int(rng.integers(1, 200)))
        expected = []
        for h in hashes.tolist():
            expected.append(h not in reference)
            reference.add(h)
        assert seen.first_seen(hashes).tolist() == expected
    assert len(seen) == len(reference)
    assert len(seen._runs) <= 2 * np.log2(len(reference))  # merged, not one run per chunk


def test_pair_hashes_tell_pairs_apart() -> None:
    h = pair_hashes(["a", "a", "ab", "a"], ["b", "b", "", "c"])
    assert h[0] == h[1] and len(set(h.tolist())) == 3


def test_reservoir_keeps_a_stream_that_fits_whole_and_in_key_order() -> None:
    r = Reservoir(10, seed=1)
    r.add(["s0", "s1"], np.array([0, 1]))
    r.add(["t0", "t1", "s2"], np.array([100, 101, 2]))
    assert list(r.drain()) == ["s0", "s1", "s2", "t0", "t1"]
    every = Reservoir(0, seed=1)  # size 0: no sampling
    every.add([str(i) for i in range(50)], np.arange(50))
    assert len(every) == 50


def _draw(seed: int) -> list[int]:
    """A 10-item sample of the stream 0..39, offered in chunks of 7."""
    r = Reservoir(10, seed=seed)
    for start in range(0, 40, 7):
        items = list(range(start, min(40, start + 7)))
        r.add([str(i) for i in items], np.array(items))
    return [int(x) for x in r.drain()]


def test_reservoir_sample_is_uniform_and_reproducible() -> None:
    """Each of 40 items lands in a 10-item sample with probability 1/4; a chi-square
    statistic over 600 samples stays below its 0.1% tail. One seed, one sample."""
    counts = np.zeros(40)
    for seed in range(600):
        sample = _draw(seed)
        assert len(set(sample)) == 10 and sample == sorted(sample)
        counts[sample] += 1
    expected = 600 * 10 / 40
    assert ((counts - expected) ** 2 / expected).sum() < 72.1  # chi2(39) 0.999 quantile
    # Algorithm R's classic mistake (drawing from [0, t) instead of [0, t]) or keeping the
    # first items shows here: the last item would be sampled far less, or never.
    assert counts[-1] > expected / 2
    assert _draw(5) == _draw(5) and _draw(5) != _draw(6)


def test_reservoir_applies_a_chunk_as_one_by_one_replacement() -> None:
    """Algorithm R applied item by item, with the same draws, keeps the same sample: also
    when several items of a chunk draw the same slot (a 3-item sample and chunks of 40 make
    that certain), where only the last of them may stay."""
    r = Reservoir(3, seed=7)
    rng = np.random.default_rng(7)
    items, keys, seen = [], [], 0
    for start in range(0, 400, 40):
        chunk = [f"x{i}" for i in range(start, start + 40)]
        r.add(chunk, np.arange(start, start + 40) * 10)
        room = max(0, min(40, 3 - len(items)))
        items += chunk[:room]
        keys += [10 * i for i in range(start, start + room)]
        slots = rng.integers(0, seen + np.arange(room, 40) + 1)
        for i, j in enumerate(slots.tolist(), room):
            if j < 3:
                items[j], keys[j] = chunk[i], 10 * (start + i)
        seen += 40
    assert list(r.drain()) == [items[i] for i in np.argsort(keys, kind="stable")]


def test_side_writer_writes_what_np_save_writes(tmp_path: Path) -> None:
    sents = [[5, 6, 7], [], [8], [9, 10]]
    w = SideWriter(tmp_path, "train", "src", 8000)
    w.append(np.array([5, 6, 7], dtype=np.uint16), np.array([3, 0]))
    w.append(np.array([8, 9, 10], dtype=np.uint16), np.array([1, 2]))
    assert w.close() == [ids_path(tmp_path, "train", "src"), offsets_path(tmp_path, "train", "src")]
    for path, array in ((ids_path(tmp_path, "train", "src"),
                         np.array([i for s in sents for i in s], dtype=np.uint16)),
                        (offsets_path(tmp_path, "train", "src"),
                         np.array([0, 3, 3, 4, 6], dtype=np.int64))):
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        assert path.read_bytes() == buf.getvalue()
    big = SideWriter(tmp_path, "x", "tgt", 70000)  # ids over 16 bits: int32
    big.append(np.array([69999], dtype=np.int32), np.array([1]))
    big.close()
    assert np.load(ids_path(tmp_path, "x", "tgt")).tolist() == [69999]


def test_a_failed_atomic_write_leaves_no_folder_it_made(tmp_path: Path) -> None:
    """`translate -o new/dir/out.txt` that failed (or a failed download into the cache) left
    new/dir behind, empty; a folder that was there, or that holds something, stays."""
    with pytest.raises(RuntimeError), fileio.atomic_write(tmp_path / "new" / "dir" / "f") as f:
        f.write("half")
        raise RuntimeError("failed")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "new").mkdir()
    with pytest.raises(RuntimeError), fileio.atomic_write(tmp_path / "new" / "dir" / "f"):
        (tmp_path / "new" / "other").write_text("not ours")
        raise RuntimeError("failed")
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["other"]
    with fileio.atomic_write(tmp_path / "a" / "b" / "f") as f:
        f.write("done")
    assert (tmp_path / "a" / "b" / "f").read_text() == "done"


def test_atomic_write_follows_links_keeps_modes_and_writes_devices_in_place(tmp_path: Path
                                                                           ) -> None:
    """A link keeps pointing at the file, now new; a file keeps its permissions; a named pipe
    (as /dev/null or /dev/stdout, which a test had better not risk) is written, not replaced
    by a plain file."""
    import os
    import stat
    import threading

    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old\n")
    real.chmod(0o600)
    link.symlink_to(real)
    with fileio.atomic_write(link) as f:
        f.write("new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_text()), daemon=True)
    reader.start()
    with fileio.atomic_write(pipe) as f:
        f.write("through\n")
    reader.join(10)
    assert got == ["through\n"] and stat.S_ISFIFO(pipe.stat().st_mode)


def test_atomic_write_to_dev_stdout_writes_where_stdout_stands(tmp_path: Path) -> None:
    """Under `>> log`, /dev/stdout is the file `log`: written through the open descriptor,
    not replaced (nor truncated), so what was in it and what follows stay."""
    import subprocess
    import sys

    log = tmp_path / "log"
    log.write_text("keep\n")
    code = ("from mtkit.fileio import atomic_write\nprint('before', flush=True)\n"
            "with atomic_write('/dev/stdout') as f:\n    f.write('translation\\n')\n"
            "print('after')\n")
    with open(log, "a") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, check=True)
    assert log.read_text() == "keep\nbefore\ntranslation\nafter\n"


def test_names_of_standard_output() -> None:
    assert all(fileio.names_stdout(p) for p in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"))
    assert not any(fileio.names_stdout(p) for p in ("/dev/stderr", "/dev/fd/2", "out.txt",
                                                     "/dev/null"))


def test_atomic_write_refuses_a_file_the_user_may_not_write(tmp_path: Path, monkeypatch) -> None:
    """The rename needs only the folder's permission: a read-only file, or another user's in
    a shared folder, was replaced (and taken over) where the shell's `>` refuses. As root,
    for whom every file is writable, the permission check is what is replaced here."""
    import os

    theirs = tmp_path / "theirs.txt"
    theirs.write_text("kept\n")
    theirs.chmod(0o444)
    if os.geteuid() == 0:
        access = os.access
        monkeypatch.setattr(fileio.os, "access", lambda p, mode, **kw: (
            mode != os.W_OK or Path(p) != theirs) and access(p, mode, **kw))
    with pytest.raises(fileio.WriteError, match=r"theirs\.txt: cannot write \(Permission "
                       r"denied\)"), fileio.atomic_write(theirs) as f:
        f.write("replaced\n")
    assert theirs.read_text() == "kept\n" and list(tmp_path.iterdir()) == [theirs]


def test_count_lines_counts_as_decode_lines_reads_and_only_plain_files(tmp_path: Path) -> None:
    import os

    cases = {"a\nb\n": 2, "a\nb": 2, "": 0, "\n\n\n": 3, "é\n" * 5000: 5000}
    for i, (text, n) in enumerate(cases.items()):
        path = tmp_path / f"{i}.txt"
        path.write_text(text, encoding="utf-8")
        with open(path, "rb") as f:
            assert fileio.count_lines(path) == n == len(list(
                fileio.decode_lines(f, InvalidUtf8(str(path)))))
    packed = tmp_path / "a.gz"
    packed.write_bytes(gzip.compress(b"a\nb\n"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert [fileio.count_lines(p) for p in (packed, fifo, tmp_path, tmp_path / "none")] == [
        None] * 4
