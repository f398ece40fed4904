"""The start of the transcoders (issue 33 dev study): one run of layers 5, 15, 25 on 200k train tokens, scored on
40k dev tokens. Arguments: lr, fit_batches (0 = no least-squares start), init ("data" or "random").

    OMP_NUM_THREADS=1 .venv/bin/python studies/features_sweep/start.py 2e-3 16 random
    OMP_NUM_THREADS=1 .venv/bin/python studies/features_sweep/start.py 2e-3 16 data

(results: start_results.txt; the line without init was run before init existed, i.e. with a random start)
"""
import torch, interp, time, sys
from interp.analyses.features import train_transcoders
from interp.analyses.features.quality import evaluate_transcoders
torch.set_num_threads(1)
m = interp.load()
lr = float(sys.argv[1]); fb = int(sys.argv[2])
t=time.time()
init = sys.argv[3] if len(sys.argv) > 3 else "data"
ds = train_transcoders(m, [5,15,25], width=2304, k=32, lr=lr, tokens=200000, fit_batches=fb, init=init, cache=False, progress=False)
q = evaluate_transcoders(m, ds, tokens=40000, ce_tokens=0, split="dev", progress=False)
print(lr, fb, init, round(time.time()-t), {r["layer"]: (round(r["fvu"],3), round(r["fvu_neurons"],3), round(r["dead_frac"],3)) for r in q.rows}, flush=True)
