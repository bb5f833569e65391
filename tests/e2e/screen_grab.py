#!/usr/bin/env python3
"""Saves the whole X screen as a PNG (native dialogs included, which WebDriver cannot see).

Usage: screen_grab.py OUT.png   (needs python3-gi with GTK 3, like drag_source.py)
"""

import sys

import gi

gi.require_version("Gdk", "3.0")
from gi.repository import Gdk  # noqa: E402


def main() -> None:
    root = Gdk.get_default_root_window()
    pixbuf = Gdk.pixbuf_get_from_window(root, 0, 0, root.get_width(), root.get_height())
    if pixbuf is None:
        sys.exit("could not read the screen")
    pixbuf.savev(sys.argv[1], "png", [], [])


if __name__ == "__main__":
    main()
