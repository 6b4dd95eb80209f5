#!/usr/bin/env python3
"""bench/fadvise_dontneed.py: evicts files from the page cache (posix_fadvise POSIX_FADV_DONTNEED).

For cold-cache timings without root's drop_caches: every regular file under each PATH (a file or a
folder, recursively) is synced and dropped from the cache. Prints how many files and bytes.

  fadvise_dontneed.py PATH [PATH ...]
"""
import os
import sys


def files(path):
    if os.path.isfile(path):
        yield path
        return
    for root, _, names in os.walk(path, followlinks=True):
        for name in names:
            yield os.path.join(root, name)


def main():
    count = size = 0
    for path in sys.argv[1:]:
        for name in files(path):
            fd = os.open(name, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                size += os.fstat(fd).st_size
                count += 1
            finally:
                os.close(fd)
    print(f"dropped {count} files, {size / 1e6:.1f} MB from the page cache", file=sys.stderr)


if __name__ == "__main__":
    main()
