#!/usr/bin/env python3
"""A tiny GTK window that offers files as a drag source, so an end-to-end test can make a real
OS drop (XDND) onto the app under Xvfb: xdotool presses on this window and releases over the app.

Usage: drag_source.py X Y FILE...   (the window is 80×80 pixels at X, Y)
Prints "ready" once the window is mapped; exits on SIGTERM.
"""

import signal
import sys
from pathlib import Path

import gi

gi.require_version("Gdk", "3.0")
gi.require_version("Gtk", "3.0")
from gi.repository import GLib, Gdk, Gtk  # noqa: E402


def main() -> None:
    x, y = int(sys.argv[1]), int(sys.argv[2])
    uris = [Path(p).resolve().as_uri() for p in sys.argv[3:]]
    window = Gtk.Window(title="e2e drag source")
    window.set_default_size(80, 80)
    window.move(x, y)
    box = Gtk.EventBox()
    box.add(Gtk.Label(label="drag"))
    window.add(box)
    box.drag_source_set(Gdk.ModifierType.BUTTON1_MASK, [], Gdk.DragAction.COPY)
    box.drag_source_add_uri_targets()
    box.connect("drag-data-get", lambda _w, _c, data, _i, _t: data.set_uris(uris))
    window.connect("destroy", Gtk.main_quit)
    window.connect("map-event", lambda *_: print("ready", flush=True))
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, Gtk.main_quit)
    window.show_all()
    Gtk.main()


if __name__ == "__main__":
    main()
