"""``python -m samples.chaos``: see :mod:`samples.chaos`; ``serve`` and ``worker`` start child
processes (:mod:`samples.chaos.children`) without importing the rest."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        from samples.chaos.children import worker_main

        sys.exit(worker_main(sys.argv[2:]))
    if sys.argv[1:2] == ["serve"]:
        from samples.chaos.children import serve_main

        sys.exit(serve_main(sys.argv[2:]))
    from samples.chaos.cli import main

    sys.exit(main())
