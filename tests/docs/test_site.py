"""The documentation site builds with ``mkdocs build --strict`` (a warning, a broken link or an
unresolved API reference fails it), and its generated pages hold what they are generated from: every
subcommand's ``--help`` on the CLI page, the public API on the reference pages, every built-in plugin in
the plugin tables."""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
pytest.importorskip("mkdocstrings", reason="the docs extra is not installed (pip install -e '.[docs]')")


def _build(out: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                          str(REPO / "mkdocs.yml"), "--site-dir", str(out)], cwd=REPO, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def _check_cli_page(site: Path) -> None:
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        import cli_reference
    finally:
        sys.path.remove(str(REPO / "docs" / "hooks"))
    from convlab.cli.parser import build_parser

    names = list(cli_reference._subcommands(build_parser()))
    assert {"demo", "explain", "bench", "tune", "check", "compile"} <= set(names)
    text = _text(site / "cli" / "index.html")
    assert "convlab-cli-reference" not in text
    for name in names:
        assert f"usage: convlab {name} " in text, name
    assert "usage: convlab bench auto " in text and "usage: convlab bench report " in text
    assert "--version" in text


def _check_api_pages(site: Path) -> None:
    import convlab
    import convlab.testing

    page = (site / "api" / "convlab" / "index.html").read_text()
    missing = [n for n in convlab.__all__ if n not in ("targets", "__version__") and
               f'id="convlab.{n}"' not in page and f'id="convlab.ops.conv.{n}"' not in page]
    assert not missing, f"convlab.{missing} not on the API page"
    testing = (site / "api" / "testing" / "index.html").read_text()
    assert 'id="convlab.testing.check_plugin"' in testing
    assert 'id="convlab.runtime.targets.using"' in (site / "api" / "targets" / "index.html").read_text()
    assert 'id="convlab.torch.convert"' in (site / "api" / "torch" / "index.html").read_text()
    assert 'id="convlab.autotune.pretune"' in (site / "api" / "autotune" / "index.html").read_text()
    assert 'id="convlab.compile.compile_corpus"' in (site / "api" / "compile" / "index.html").read_text()
    assert ":func:`" not in _text(site / "api" / "convlab" / "index.html")


def _check_plugin_tables(site: Path) -> None:
    import convlab

    builtin = [p.name for p in convlab.plugins() if type(p).__module__.startswith("convlab.algorithms.")]
    for page in (site / "index.html", site / "concepts" / "plugins" / "index.html"):
        text = page.read_text()
        assert "convlab-plugin-table" not in text and all(f"<code>{name}</code>" in text for name in builtin), page


def test_site_builds_strict_with_the_generated_pages(tmp_path):
    # one test, so that pytest-xdist builds the site once
    _build(tmp_path)
    _check_cli_page(tmp_path)
    _check_api_pages(tmp_path)
    _check_plugin_tables(tmp_path)
