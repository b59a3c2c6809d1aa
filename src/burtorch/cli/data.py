"""``burtorch data``: the registered data sets, and downloading one into the cache by name."""
from __future__ import annotations

import sys

DESCRIPTION = """\
The paper's data sets by name. 'get' downloads one into the cache directory ($BURTORCH_DATA,
else the platform's user cache) once, verifies its SHA-256 (or, for a set whose source publishes
none, an MD5 published by a third party, named in 'list') and prints its path; a file that does
not match is refused. Offline, place the file in the cache directory by hand (the error says where).
'list' shows every name with its source, licence and whether a checksum is recorded."""


def register(sub) -> None:
    """Adds the ``data`` command to the subparsers of ``burtorch``."""
    import argparse

    p = sub.add_parser("data", help="the paper's data sets by name: list them, download one",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    get = actions.add_parser("get", help="download (once) and verify a data set; print its path")
    get.add_argument("names", nargs="+", metavar="NAME", help="a registered name (see 'burtorch data list')")
    get.add_argument("--offline", action="store_true", help="never download: check the cached file only")
    get.add_argument("--unverified", action="store_true",
                     help="allow a data set with no recorded checksum (its digest is printed)")
    get.set_defaults(func=_get)
    ls = actions.add_parser("list", help="the registered data sets and the cache directory")
    ls.set_defaults(func=_list)


def _get(args) -> int:
    from ..data import registry

    status = 0
    for name in args.names:
        try:
            print(registry.fetch(name, download=not args.offline, unverified=args.unverified))
        except (OSError, ValueError) as e:
            print(f"burtorch data get: {e}", file=sys.stderr)
            status = 1
    return status


def _list(args) -> int:
    from ..data import registry

    print(f"cache directory: {registry.cache_dir()}")
    for ds in registry.DATASETS.values():
        cached = (registry.cache_dir() / ds.filename).is_file()
        if ds.sha256:
            check = f"sha256 {ds.sha256[:16]}..."
        elif ds.md5:
            check = f"md5 {ds.md5} from {ds.checksum_source}"
        else:
            check = "no checksum recorded (unverified)"
        print(f"\n{ds.name}{' (cached)' if cached else ''}: {ds.description}\n  source:  {ds.url}\n"
              f"  licence: {ds.licence}\n  {check}")
    return 0
