#!/usr/bin/env python3
# openb-style pod lists that are not among the bundled traces, for checking
# that an fgd change generalises (docs/alloc.md, "Against the paper, trace by
# trace"; figures in bench/results/fgd_ties.txt).  Resamples the openb default
# pod list by category - pods without GPUs, sharing (1 GPU < 1000 milli), one
# whole GPU, multi-GPU - to a target share of the GPU request, and gives a
# fraction of GPU pods a gpu_spec drawn from gpuspec33's typed pods.  The
# first seven lists are those of bench/results/fgd_ties.txt; make bench's
# packing benchmark (bench/bench_packing.py) replays all of them.
# Usage: bench/fgd_resample_openb.py OPENB_DIR OUT_DIR
import csv
import os
import random
import sys

D, OUT = sys.argv[1], sys.argv[2]
rows=list(csv.DictReader(open(os.path.join(D, 'openb_pod_list_default.csv'))))
spec=list(csv.DictReader(open(os.path.join(D, 'openb_pod_list_gpuspec33.csv'))))
specs=[p['gpu_spec'] for p in spec if int(p['num_gpu'])>0 and p['gpu_spec']]
fields=list(rows[0].keys())
def gpu(p): return int(p['num_gpu'])*int(p['gpu_milli'])
cpuonly=[p for p in rows if int(p['num_gpu'])==0]
share=[p for p in rows if int(p['num_gpu'])==1 and int(p['gpu_milli'])<1000]
whole1=[p for p in rows if int(p['num_gpu'])==1 and int(p['gpu_milli'])==1000]
multi=[p for p in rows if int(p['num_gpu'])>1]
def write(name, pods):
    with open(os.path.join(OUT, name), 'w', newline='') as f:
        w=csv.DictWriter(f, fieldnames=fields); w.writeheader()
        for i,p in enumerate(pods):
            q=dict(p); q['name']='pod-%05d'%i; w.writerow(q)
def mix(seed, n, fr_share, fr_multi, fr_cpu=len(cpuonly)/len(rows), typed=0.0):
    # fr_share / fr_multi: fraction of GPU request from sharing / multi-GPU pods
    r=random.Random(seed)
    ms=sum(map(gpu,share))/len(share); mw=sum(map(gpu,whole1))/len(whole1); mm=sum(map(gpu,multi))/len(multi)
    fr_whole=1-fr_share-fr_multi
    # pods per category proportional to request fraction / mean request
    cnt={'s':fr_share/ms,'w':fr_whole/mw,'m':fr_multi/mm}
    tot=sum(cnt.values()); ngpu=int(n*(1-fr_cpu))
    out=[r.choice(cpuonly) for _ in range(n-ngpu)]
    for k,pool in (('s',share),('w',whole1),('m',multi)):
        for _ in range(round(ngpu*cnt[k]/tot)):
            p=dict(r.choice(pool))
            if typed and r.random()<typed: p['gpu_spec']=r.choice(specs)
            out.append(p)
    r.shuffle(out); return out
n=len(rows)
write('gpushare50.csv', mix(1, n, .50, .10))
write('gpushare70.csv', mix(2, n, .70, .07))
write('multigpu25.csv', mix(3, n, .20, .25))
write('gpuspec20.csv', mix(4, n, .25, .10, typed=.20))
write('gpuspec50.csv', mix(5, n, .25, .10, typed=.50))
write('cpu150.csv', mix(6, n, .25, .10, fr_cpu=.15))
write('mixA.csv', mix(7, n, .45, .20, typed=.25))
# more mixes (issue 27): the ends of each range and other combinations
write('gpushare30.csv', mix(8, n, .30, .05))
write('gpushare90.csv', mix(9, n, .90, .02))
write('multigpu40.csv', mix(10, n, .25, .40))
write('gpuspec10.csv', mix(11, n, .35, .10, typed=.10))
write('cpu300.csv', mix(12, n, .25, .10, fr_cpu=.30))
write('mixB.csv', mix(13, n, .60, .15, fr_cpu=.20, typed=.10))
