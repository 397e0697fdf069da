"""Writing files the way the `kiln` CLI does: checked before any work is done, written
atomically (a temporary file in the same folder, then a rename), with the permissions
the umask gives (as `kiln build -o` and kiln_engine_save: 0666 & ~umask), and errors
that name the user's path, never the temporary one."""

import errno
import io
import os
import secrets
import shutil
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
