"""``python -m toolhost …``: the ``toolhost`` command (see ``toolhost._cli``)."""

from toolhost._cli import main

main()
