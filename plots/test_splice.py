"""CPU test of `plot.py splice`: a run's rows replace their own, or go after the variants before them in teaching
order, and every other row keeps its text."""
import os
import subprocess
import sys
import tempfile

HEADER = "gpu,stage,problem,size,variant,name,peer,time_ms\n"
ROW = '"GPU X",stage10,"{p}",n1,{v},"{v} does it",0,{t}\n'


def rows(pairs):
    return "".join(ROW.format(p=p, v=v, t=t) for p, v, t in pairs)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        committed = os.path.join(tmp, "results", "gpu-x", "stage10.csv")
        os.makedirs(os.path.dirname(committed))
        with open(committed, "w") as f:  # the peer last, as a stage's table lists it
            f.write(HEADER + rows([("a", "v1", 1), ("a", "v3", 3), ("a", "cuBLAS", 9), ("b", "v1", 1)]))
        run = os.path.join(tmp, "run.csv")
        with open(run, "w") as f:  # no newline after the last row, as a hand-made file may have
            f.write((HEADER + rows([("a", "v2", 2), ("b", "v1", 7), ("c", "v2", 5)])).rstrip("\n"))
        plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.py")
        subprocess.run([sys.executable, plot, "splice", run, "--results", os.path.join(tmp, "results")], check=True)
        with open(committed) as f:
            got = f.read()
        want = HEADER + rows([("a", "v1", 1), ("a", "v2", 2), ("a", "v3", 3), ("a", "cuBLAS", 9), ("b", "v1", 7),
                              ("c", "v2", 5)])
        if got != want:
            sys.exit(f"splice gave:\n{got}\nwanted:\n{want}")
        with open(run, "w") as f:  # other columns than the committed file's: refused, the file untouched
            f.write("gpu,stage,problem\n" + '"GPU X",stage10,"a"\n')
        r = subprocess.run([sys.executable, plot, "splice", run, "--results", os.path.join(tmp, "results")],
                           capture_output=True, text=True)
        with open(committed) as f:
            if r.returncode == 0 or "columns differ" not in r.stderr or f.read() != want:
                sys.exit(f"splice took a file of other columns: exit {r.returncode}, {r.stderr}")
    print("splice: 2 cases ok")


if __name__ == "__main__":
    main()
