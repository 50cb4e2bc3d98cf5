"""fleet.node.stale: which preloaded modules are stamped, and when a step is told its
module changed (in one process: the stamps are plain data a fork copies)."""

from __future__ import annotations

import os
import sys

from fleet.node import stale


def test_a_user_module_imported_by_a_preload_is_stamped_and_an_edit_is_said_but_installed_libraries_are_not(
        tmp_path, monkeypatch):
    (tmp_path / "stale_user_mod.py").write_text("def f(ctx):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(stale, "_stamps", {})
    for name in ("stale_user_mod", "colorsys"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    before = set(sys.modules)
    import colorsys  # noqa: F401  (the standard library: installed)
    import stale_user_mod  # noqa: F401
    stale.stamp_new(before)
    assert set(stale._stamps) == {"stale_user_mod"}
    assert stale.changed("stale_user_mod:f") is None and stale.changed("colorsys:rgb_to_hsv") is None
    assert stale.changed(None) is None
    file = tmp_path / "stale_user_mod.py"
    st = file.stat()
    os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    line = stale.changed("stale_user_mod:f")
    assert line is not None and line.startswith(f"fleet: {file} changed after this node's zygote imported "
                                                "module 'stale_user_mod' (preloaded)")


def test_a_module_whose_attributes_raise_is_passed_over_not_a_reason_to_fail(monkeypatch):
    class Lazy:  # (what a module-level __getattr__ that raises looks like from outside)
        def __getattr__(self, name):
            raise ImportError(name)

    monkeypatch.setattr(stale, "_stamps", {})
    before = set(sys.modules)
    monkeypatch.setitem(sys.modules, "stale_lazy_mod", Lazy())
    stale.stamp_new(before)  # (raised ImportError before)
    assert "stale_lazy_mod" not in stale._stamps
