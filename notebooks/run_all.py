"""Execute every notebook in this folder top to bottom; write executed copies and their figures.

    python notebooks/run_all.py OUT_DIR [--only 01,03] [--size tiny|full] [--engine auto|nbclient|inline]

For each ``NN_name.ipynb`` here: ``OUT_DIR/NN_name.ipynb`` with outputs, and the PNG figures the notebook
saves in ``OUT_DIR/figures/`` (through ``CONVLAB_FIGURE_DIR``). ``--size`` sets ``CONVLAB_NOTEBOOK_SIZE``
(default: each notebook picks ``full`` on a GPU, ``tiny`` on the simulator). Engines:

- ``nbclient``: a Jupyter kernel running this interpreter (kernel name ``python3``), as CI does;
- ``inline``: no Jupyter needed (the GPU image has none): a fresh interpreter per notebook runs its code
  cells in order and records each cell's stdout, stderr, last value, error and matplotlib figures (Agg)
  into the executed copy, in the same nbformat-4 layout;
- ``auto`` (default): nbclient when it is installed, else inline.

Exit status 0 when every notebook ran to the end, 1 otherwise (the partial executed copy is written).
"""
from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import io
import json
import linecache
import os
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
CELL_TIMEOUT_S = 900


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The notebooks of this folder in order, or those whose names start with one of ``only``."""
    found = sorted(p for p in HERE.glob("[0-9][0-9]_*.ipynb"))
    return [p for p in found if only is None or any(p.name.startswith(o) for o in only)]


@contextlib.contextmanager
def patched_environ(**values: str | None) -> Iterator[None]:
    """Set (or, with None, remove) environment variables for the duration of the block."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# ---- engine 1: a Jupyter kernel through nbclient ---------------------------------------------------
@contextlib.contextmanager
def this_interpreter_kernel() -> Iterator[str]:
    """A folder for JUPYTER_PATH whose kernel spec ``python3`` runs this interpreter."""
    with tempfile.TemporaryDirectory(prefix="convlab-kernels-") as folder:
        spec = Path(folder) / "kernels" / "python3"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (convlab)", "language": "python"}))
        yield folder


def run_nbclient(src: Path, dst: Path, env: dict[str, str | None], timeout: int = CELL_TIMEOUT_S
                 ) -> str | None:
    """Execute ``src`` in a kernel, write the executed copy to ``dst``; the error text, or None."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(src, as_version=4)
    error = None
    with this_interpreter_kernel() as kernels:
        with patched_environ(**env, JUPYTER_PATH=kernels):
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                    resources={"metadata": {"path": str(src.parent)}})
            try:
                client.execute()
            except CellExecutionError as exc:
                error = str(exc)
            finally:
                dst.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, dst)
    return error


# ---- engine 2: inline, without Jupyter -----------------------------------------------------------
def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _run_cell(source: str, namespace: dict, number: int) -> object:
    """Run one cell like IPython does: statements, then the value of a final expression."""
    name = f"<cell {number}>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)  # tracebacks show lines
    tree = ast.parse(source, name)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, name, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), name, "eval"), namespace)


def _figures() -> list[dict]:
    """display_data outputs for the open matplotlib figures, which are then closed."""
    import matplotlib.pyplot as plt

    outputs = []
    for number in plt.get_fignums():
        fig = plt.figure(number)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        outputs.append({"output_type": "display_data", "metadata": {},
                        "data": {"image/png": base64.b64encode(buf.getvalue()).decode(),
                                 "text/plain": [repr(fig)]}})
    plt.close("all")
    return outputs


def inline_worker(src: Path, dst: Path) -> int:
    """Run in a fresh interpreter (cwd = the notebook's folder): execute ``src`` into ``dst``."""
    import matplotlib

    matplotlib.use("Agg")
    nb = json.loads(src.read_text())
    main = types.ModuleType("__main__")  # a clean namespace, like a kernel's
    sys.modules["__main__"] = main
    count, failed = 0, False
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        count += 1
        out, err, outputs, value = io.StringIO(), io.StringIO(), [], None
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                value = _run_cell(_source(cell), main.__dict__, count)
        except BaseException as exc:  # noqa: BLE001 - recorded in the notebook like Jupyter does
            failed = True
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
            error = {"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc),
                     "traceback": [line.rstrip("\n") for line in tb]}
        for name, stream in (("stdout", out), ("stderr", err)):
            if stream.getvalue():
                outputs.append({"output_type": "stream", "name": name, "text": stream.getvalue()})
        if value is not None:
            outputs.append({"output_type": "execute_result", "execution_count": count, "metadata": {},
                            "data": {"text/plain": repr(value)}})
        outputs += _figures()
        if failed:
            outputs.append(error)
        cell["outputs"], cell["execution_count"] = outputs, count
        if failed:
            break
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return 1 if failed else 0


def run_inline(src: Path, dst: Path, env: dict[str, str | None], timeout: int = CELL_TIMEOUT_S * 4
               ) -> str | None:
    """Execute ``src`` in a fresh interpreter without Jupyter; the error text, or None."""
    child_env = {k: v for k, v in os.environ.items() if k not in env or env[k] is not None}
    child_env.update({k: v for k, v in env.items() if v is not None}, MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--inline-worker", str(src),
                           str(dst)], cwd=src.parent, env=child_env, timeout=timeout,
                          capture_output=True, text=True)
    if done.returncode == 0:
        return None
    if dst.is_file():
        for cell in json.loads(dst.read_text())["cells"]:
            for output in cell.get("outputs", []):
                if output["output_type"] == "error":
                    return "\n".join(output["traceback"])
    return done.stderr[-4000:] or f"exit status {done.returncode}"


# ---- driver -------------------------------------------------------------------------------------
def run(out_dir: Path, only: list[str] | None = None, size: str | None = None, engine: str = "auto",
        timeout: int = CELL_TIMEOUT_S) -> dict[str, str | None]:
    """Execute the notebooks into ``out_dir``; {notebook name: error text or None}."""
    if engine == "auto":
        try:
            import ipykernel  # noqa: F401
            import nbclient  # noqa: F401
            engine = "nbclient"
        except ImportError:
            engine = "inline"
    runner = run_nbclient if engine == "nbclient" else run_inline
    out_dir = out_dir.resolve()
    env = {"CONVLAB_FIGURE_DIR": str(out_dir / "figures")}
    if size is not None:
        env["CONVLAB_NOTEBOOK_SIZE"] = size
    errors = {}
    for src in notebooks(only):
        start = time.perf_counter()
        errors[src.name] = runner(src, out_dir / src.name, env, timeout)
        status = "ok" if errors[src.name] is None else "FAILED"
        print(f"{src.name:<28} {status:<6} {time.perf_counter() - start:7.1f} s  ({engine})", flush=True)
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for the executed notebooks and figures/")
    parser.add_argument("--only", default=None, help="comma-separated name prefixes, e.g. 01,03")
    parser.add_argument("--size", choices=("tiny", "full"), default=None)
    parser.add_argument("--engine", choices=("auto", "nbclient", "inline"), default="auto")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell (nbclient)")
    args = parser.parse_args(argv)
    only = None if args.only is None else [o.strip() for o in args.only.split(",") if o.strip()]
    if not notebooks(only):
        parser.error(f"no notebook matches {args.only!r}")
    errors = run(args.out_dir, only, args.size, args.engine, args.timeout)
    for name, error in errors.items():
        if error is not None:
            print(f"\n{name} failed:\n{error[-3000:]}", file=sys.stderr)
    figures = sorted((args.out_dir / "figures").glob("*.png"))
    print(f"executed copies in {args.out_dir}; figures: {[f.name for f in figures]}")
    return 1 if any(e is not None for e in errors.values()) else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--inline-worker":
        sys.exit(inline_worker(Path(sys.argv[2]), Path(sys.argv[3])))
    sys.exit(main())
