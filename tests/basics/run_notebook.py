"""Execute a notebook of snippets/ as a reader's JupyterLab does, and print its outputs.

Usage: python run_notebook.py NOTEBOOK [CELL_TIMEOUT]

Run by the harness (``launcher="python"``) in the run's working directory. First it
makes the kernel the page tells the reader to make, with the page's command
(``python -m ipykernel install --user --name NAME --env PATH "$VIRTUAL_ENV/bin:$PATH"``),
into a Jupyter data folder of the run's own (``JUPYTER_DATA_DIR``: the reader's home is not touched). Then it runs every
cell in order, in that kernel, with the working directory as the notebook's folder, each
cell within CELL_TIMEOUT seconds (nbclient stops the run when one takes longer). A cell
that raises fails the run, unless it is tagged ``raises-exception`` (the cells that show
what does not work). The executed notebook is saved as ``executed.ipynb``; each code
cell's outputs are printed under a line ``--- cell N ---``, streams and results as text,
an error as ``ERROR Name: message``.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def text(output) -> str:
    if output.output_type == "stream":  # `!command` output comes through a terminal
        return output.text.replace("\r\n", "\n")
    if output.output_type == "error":
        return f"ERROR {output.ename}: {output.evalue}\n"
    return output.get("data", {}).get("text/plain", "") + "\n"


def main() -> int:
    notebook = Path(sys.argv[1])
    cell_timeout = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    nb = nbformat.read(notebook, as_version=4)
    name = nb.metadata.kernelspec.name
    os.environ["JUPYTER_DATA_DIR"] = str(Path.cwd() / "jupyter-data")
    # A JupyterLab started without the environment active: its bin folder is not on the
    # PATH until the kernel's own setting (--env PATH, as the page says) puts it there.
    venv_bin = Path(sys.executable).parent
    # ipykernel passes the output of the processes a cell starts on to the notebook,
    # except under pytest: the kernel must not know that a test started it.
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    os.environ["PATH"] = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and Path(d) != venv_bin)
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user", "--name", name,
                    "--display-name", nb.metadata.kernelspec.display_name,
                    "--env", "PATH", f"{venv_bin}{os.pathsep}{os.environ['PATH']}"],
                   check=True, timeout=60)
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name=name,
                            resources={"metadata": {"path": str(Path.cwd())}})
    try:
        client.execute()
    finally:
        nbformat.write(nb, "executed.ipynb")
        number = 0
        for cell in nb.cells:
            if cell.cell_type == "code":
                number += 1
                print(f"--- cell {number} ---")
                print("".join(text(o) for o in cell.get("outputs", [])), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
