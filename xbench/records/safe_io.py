"""File primitives for folders others can write to (a shared store, a report folder): nothing is written
through a link, nothing read from there is more than data.

Writing
- `atomic_write(path, data)`: a temporary file of an unpredictable name (mkstemp) in the target folder,
  written, fsynced, then os.replace'd over `path`; a reader sees the old file or the new one, and a torn
  write leaves only a `.<name>.*.tmp` file that `clean_temp` removes on the next start.
- `open_append(path)` / `open_exclusive(path)`: opened with O_NOFOLLOW (a planted symlink is refused,
  not followed) and checked to be a regular file (a FIFO or a device is refused too).
- Every writer refuses a target folder that is itself a symlink (`check_folder`): a planted link in
  place of a run folder would otherwise take every file of the run elsewhere. The store's root (the
  user's own setting) may be a link; only the folders below it are checked.
- A refusal is `LinkRefused` (an OSError, errno ELOOP) naming the path, so every caller's handling of
  an unwritable store applies to it.

Reading
- `read_limited(path, max_bytes)`: regular files only, at most `max_bytes` (a FIFO would block, /dev/zero
  never ends, a huge file fills memory).
- `load_json` / `load_yaml`: parsed as data only (json; yaml's SafeLoader), with a size cap, a nesting
  depth cap and, for YAML, a cap on aliases (an alias bomb is a few lines that expand to billions of
  nodes for whoever walks them).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

MAX_DEPTH = 64  # nesting of a record or a config: a few levels in practice
MAX_YAML_BYTES = 4 << 20
MAX_YAML_ALIASES = 256
TEMP_SUFFIX = ".tmp"


class LinkRefused(OSError):
    """A symlink (or another non-regular file) where xbench writes a regular file or a folder."""

    def __init__(self, path, what: str = "a symbolic link"):
        super().__init__(
            errno.ELOOP, f"refused to write through {what} (planted in a shared folder?)", str(path)
        )


def umask() -> int:
    """The process umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def file_mode() -> int:
    """The permissions any new file gets (0666 less the umask), not mkstemp's 0600: the user's group reads
    a store as the umask says."""
    return 0o666 & ~umask()


def check_folder(folder: str | os.PathLike) -> Path:
    """`folder`, refused (LinkRefused) if it is a symlink or not a folder."""
    folder = Path(folder)
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise LinkRefused(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise LinkRefused(folder, "something that is not a folder")
    return folder


def make_folder(folder: str | os.PathLike) -> Path:
    """Create `folder` (and its parents) if missing; refuse it if it is a link."""
    folder = Path(folder)
    if not os.path.lexists(folder):
        folder.mkdir(parents=True, exist_ok=True)
    return check_folder(folder)


def _check_target(path: Path) -> None:
    """A file xbench is about to replace must not be a link (replacing one is harmless, but it was
    planted)."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise LinkRefused(path)
        if not stat.S_ISREG(st.st_mode):
            raise LinkRefused(path, "something that is not a regular file")


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike, binary: bool = True, fsync: bool = True) -> Iterator:
    """A file object whose content replaces `path` when the block ends without error (temporary file of an
    unpredictable name in the same folder, fsync unless `fsync=False`, os.replace); on error the temporary
    file is removed."""
    path = Path(path)
    make_folder(path.parent)
    _check_target(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike, data: str | bytes, fsync: bool = True) -> Path:
    """Write `data` to `path` atomically (see atomic_writer); text is UTF-8."""
    with atomic_writer(path, binary=isinstance(data, bytes), fsync=fsync) as f:
        f.write(data)
    return Path(path)


def _open_regular(path: Path, flags: int):
    fd = os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0),
                 file_mode())
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LinkRefused(path, "something that is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_fd(path: str | os.PathLike, flags: int) -> int:
    """os.open(path, flags) without following a final symlink, in a folder that is not a link, checked to be
    a regular file; ELOOP (a planted link) becomes LinkRefused naming the path."""
    path = Path(path)
    check_folder(path.parent)
    try:
        return _open_regular(path, flags | os.O_NONBLOCK)  # a FIFO must not block the open
    except OSError as e:
        if e.errno == errno.ELOOP and not isinstance(e, LinkRefused):
            raise LinkRefused(path) from None
        raise


def open_append(path: str | os.PathLike, binary: bool = False):
    """`path` opened to append (created if missing), never through a link; a file object."""
    fd = open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab" if binary else "a", encoding=None if binary else "utf-8")


def open_exclusive(path: str | os.PathLike, binary: bool = False):
    """`path` created anew (it must not exist: O_EXCL, which never follows a link); a file object."""
    fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8")


def open_truncate(path: str | os.PathLike, binary: bool = False):
    """`path` opened to write from empty (created if missing), never through a link; a file object."""
    fd = open_fd(path, os.O_WRONLY | os.O_CREAT)
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)  # after the checks: a link or a FIFO is never truncated
    return os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8")


def clean_temp(folder: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Remove the temporary files a torn atomic write left in `folder` (`.<name>.*.tmp`; every name when
    None). Call it only from the process that owns the folder (the run's lock holder). The removed paths."""
    out = []
    with contextlib.suppress(OSError):
        for p in Path(folder).glob(f".{name or '*'}.*{TEMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                os.unlink(p)  # unlink removes a link itself, never its target
                out.append(p)
    return out


def read_limited(path: str | os.PathLike, max_bytes: int, what: str = "data") -> bytes:
    """The bytes of a regular file of at most `max_bytes` (a FIFO, a device, a folder or a bigger file is
    refused with ValueError without blocking or filling memory)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
            raise ValueError(f"{kind}, not a {what} file")
        if st.st_size > max_bytes:
            raise ValueError(f"{st.st_size} bytes, more than a {what} holds ({max_bytes} at most)")
        with os.fdopen(os.dup(fd), "rb") as f:
            # read(max_bytes + 1) at once allocates that much for every file (64 MiB for a 5 KB record: 0.1 ms
            # each); the size it has, then what it grew by since, up to the limit
            data = f.read(st.st_size + 1)
            if len(data) > st.st_size:
                data += f.read(max_bytes + 1 - len(data))
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError(f"more than a {what} holds ({max_bytes} bytes at most)")
    return data


def depth(obj, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists/dicts (iterative: a deep object cannot exhaust the stack); stops past
    `limit`."""
    if not isinstance(obj, (dict, list, tuple)):
        return 0
    deepest, todo = 0, [(obj, 1)]
    while todo:  # only containers go on the stack: a record's thousands of numbers are looked at once each
        x, d = todo.pop()
        if d > deepest:
            deepest = d
            if deepest > limit:
                return deepest
        values = x.values() if isinstance(x, dict) else x
        if _LEAVES.issuperset(map(type, values)):  # a series of numbers: checked in C, not one by one
            continue
        todo += [(v, d + 1) for v in values if isinstance(v, (dict, list, tuple))]
    return deepest


_LEAVES = frozenset((int, float, str, bool, type(None)))  # exact types: a subclass is looked at in Python


def load_json(data: str | bytes, max_bytes: int, max_depth: int = MAX_DEPTH, **kwargs):
    """JSON text parsed as data, refused (ValueError) past `max_bytes` or `max_depth` levels of nesting."""
    if len(data) > max_bytes:
        raise ValueError(f"{len(data)} bytes of JSON, more than {max_bytes} allowed")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        out = json.loads(text, **kwargs)
    except RecursionError:
        raise ValueError(f"JSON nested too deeply (more than {max_depth} levels)") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    # each level opens with [ or {: text with no more of them than the limit (a record's usual ~25) cannot
    # nest deeper, and counting them is ~1 us where walking the object is ~30 (10,000 records: 0.3 s)
    opened = text.count("[") + text.count("{")
    if opened > max_depth and depth(out, max_depth) > max_depth:
        raise ValueError(f"JSON nested too deeply (more than {max_depth} levels)")
    return out


def load_yaml(text: str | bytes, max_bytes: int = MAX_YAML_BYTES, max_depth: int = MAX_DEPTH,
              max_aliases: int = MAX_YAML_ALIASES):
    """YAML parsed as data (SafeLoader: no tags that build objects), refused (ValueError) past `max_bytes`,
    `max_depth` levels of nesting or `max_aliases` aliases (an alias bomb)."""
    import yaml

    if len(text) > max_bytes:
        raise ValueError(f"{len(text)} bytes of YAML, more than {max_bytes} allowed")

    class Loader(yaml.SafeLoader):
        aliases = level = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > max_aliases:
                    raise ValueError(f"YAML with more than {max_aliases} aliases (an alias bomb?)")
            self.level += 1
            if self.level > max_depth:
                raise ValueError(f"YAML nested too deeply (more than {max_depth} levels)")
            try:
                return super().compose_node(parent, index)
            finally:
                self.level -= 1

    loader = Loader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise ValueError(f"not valid YAML: {e}") from None
    finally:
        loader.dispose()
