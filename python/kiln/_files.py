"""Writing files the way the `kiln` CLI does: checked before any work is done, written
atomically (a temporary file in the same folder, then a rename), with the permissions
the umask gives (as `kiln build -o` and kiln_engine_save: 0666 & ~umask), and errors
that name the user's path, never the temporary one."""

import errno
import io
import os
import secrets
import shutil
import stat
from pathlib import Path


def check_output_path(path, what):
    """Fails before an export or build when `path` (a str / PathLike, or a binary file
    object) cannot be written: a wrong type, a text-mode file object, a missing or
    unwritable folder, or a path that is a folder or not a regular file. `what` names
    the argument in messages ("file_path", "kiln.save path")."""
    if isinstance(path, (str, os.PathLike)):
        text = os.fsdecode(os.fspath(path))
        if not text:
            raise ValueError(f"{what} is empty")
        p = Path(text)
        if p.is_dir():
            raise IsADirectoryError(errno.EISDIR, f"{what} '{text}' is a folder; give a file "
                                                  f"name inside it")
        if p.exists() and not p.is_file():
            raise OSError(errno.EINVAL, f"{what} '{text}' exists and is not a regular file "
                                        f"(a device, FIFO or socket); kiln replaces only "
                                        f"regular files")
        parent = p.parent
        if not parent.exists():
            raise FileNotFoundError(errno.ENOENT, f"{what} '{text}': the folder '{parent}' "
                                                  f"does not exist")
        if not parent.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{what} '{text}': '{parent}' is not a "
                                                    f"folder")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, f"{what} '{text}': the folder '{parent}' is "
                                                f"not writable")
        return
    if hasattr(path, "write"):
        if isinstance(path, io.TextIOBase):
            raise TypeError(f"{what} is a text-mode file object; engines are bytes: open it "
                            f"in binary mode ('wb') or pass io.BytesIO()")
        return
    raise TypeError(f"{what} must be a str, a pathlib.Path or a binary file object (e.g. "
                    f"io.BytesIO); got {type(path).__name__}")


ENGINE_MAGIC = b"KILN\x89\r\n\x1a\n\0\0\0"  # an engine file's first 12 bytes (format.h)


def check_engine_target(path, what):
    """Fails where an engine written to `path` would replace a file that is not an
    engine: kiln replaces only engines and empty files there (a link is replaced itself,
    not what it points to), as kiln_engine_save and `kiln build -o` do. kiln.save(m,
    'model.onnx') replaced the model, or its external weights, without a word. A binary
    file object is the caller's to choose."""
    if not isinstance(path, (str, os.PathLike)):
        return
    text = os.fsdecode(os.fspath(path))
    try:
        st = os.lstat(text)
    except OSError:
        return  # (missing: written new; other problems: check_output_path / the write)
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return
    try:
        fd = os.open(text, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return  # (unreadable: the write names what is wrong)
    try:
        head = os.pread(fd, len(ENGINE_MAGIC), 0)
    finally:
        os.close(fd)
    if head != ENGINE_MAGIC:
        raise FileExistsError(errno.EEXIST, f"{what} '{text}' exists and is not a kiln engine "
                                            f"(a model, its weights, a timing cache?); kiln "
                                            f"replaces only engines and empty files: remove it "
                                            f"or name another file")


def atomic_write(path, data=None, *, source=None):
    """Writes bytes `data`, or the contents of the file `source`, to `path`: a temporary
    '.kiln-<16 hex>.tmp' in the same folder (created 0666 & ~umask; short, as the C
    library's, so that a name near the file system's 255-byte limit still has one), fsync,
    rename over `path` (a symbolic link at `path` is replaced, its target untouched, as
    `kiln build -o` does). On failure the temporary file is removed and the error names
    `path`."""
    path = Path(os.fsdecode(os.fspath(path)))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.parent / f".kiln-{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise type(e)(e.errno, f"cannot write '{path}': {e.strerror}") from None
    else:
        raise FileExistsError(errno.EEXIST, f"cannot write '{path}': no free temporary name")
    try:
        with os.fdopen(fd, "wb") as f:
            if source is None:
                f.write(data)
            else:
                with open(source, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 20)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise type(e)(e.errno, f"cannot write '{path}': {e.strerror}") from None
        raise
