#!/usr/bin/env python3
# Heterogeneous clusters for the packing benchmark (bench/bench_packing.py,
# docs/alloc.md "Generalisation"): openb-format node lists of several GPU
# models with skewed supply, and pod lists resampled from openb default whose
# GPU pods are typed to those models in proportions unlike their supply.
# Deterministic (fixed seeds).  Usage: bench/hetero_clusters.py OPENB_DIR OUT_DIR
# Writes OUT_DIR/<name>_nodes.csv and OUT_DIR/<name>_pods.csv per cluster.
import csv
import os
import random
import sys

D, OUT = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(os.path.join(D, 'openb_pod_list_default.csv'))))
fields = list(rows[0].keys())
if 'gpu_spec' not in fields:
    fields.append('gpu_spec')

# node types: model, GPUs, cores, memory MiB (8-GPU types hold openb's
# largest pods: 8 GPUs, up to 120 cores)
TYPES = {
    'H100': (8, 192, 2097152), 'A100': (8, 128, 1048576), 'L40': (4, 64, 524288),
    'A10': (2, 48, 262144), 'T4': (1, 16, 131072), 'V100': (4, 96, 393216),
}


def cluster(name, seed, supply, typed, demand, gpus=3000, cpu_scale=1.0):
    """supply: model -> share of the cluster's GPUs; typed: share of GPU pods
    typed; demand: list of (gpu_spec, weight) for typed pods."""
    r = random.Random(seed)
    nodes = []
    for model, share in supply.items():
        g, cores, mem = TYPES[model]
        for _ in range(max(1, round(gpus * share / g))):
            nodes.append((model, g, int(cores * cpu_scale), mem))
    r.shuffle(nodes)
    with open(os.path.join(OUT, name + '_nodes.csv'), 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['sn', 'cpu_milli', 'memory_mib', 'gpu', 'model'])
        for i, (model, g, cores, mem) in enumerate(nodes):
            w.writerow(['node-%05d' % i, cores * 1000, mem, g, model])
    cap = sum(n[1] for n in nodes) * 1000
    specs, weights = zip(*demand)
    out, req = [], 0
    while req < cap:  # templates for about one cluster's capacity
        p = dict(r.choice(rows))
        p.setdefault('gpu_spec', '')
        k = int(p['num_gpu'])
        if k > 0 and r.random() < typed:
            p['gpu_spec'] = r.choices(specs, weights)[0]
        else:
            p['gpu_spec'] = ''
        req += k * int(p['gpu_milli'])
        out.append(p)
    with open(os.path.join(OUT, name + '_pods.csv'), 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for i, p in enumerate(out):
            p['name'] = 'pod-%05d' % i
            w.writerow(p)


# a scarce fast model asked for far beyond its supply
cluster('het_scarce', 1, {'H100': .08, 'A100': .52, 'L40': .25, 'T4': .15}, .25,
        [('H100', 5), ('A100', 2), ('H100|A100', 2), ('T4', 1)])
# typed demand on the big pool (most GPUs are of a model many pods require)
cluster('het_bigtyped', 2, {'A100': .70, 'A10': .20, 'T4': .10}, .30,
        [('A100', 6), ('A10', 2), ('T4', 2)])
# typed demand below supply on every model, lists of models
cluster('het_lists', 3, {'A100': .25, 'V100': .35, 'L40': .25, 'A10': .15}, .35,
        [('A100|V100', 3), ('L40|A10', 3), ('V100', 2), ('A10', 1), ('A100', 1)])
# CPU-poor inference nodes beside large training nodes
cluster('het_cpupoor', 4, {'H100': .40, 'L40': .30, 'T4': .30}, .15,
        [('T4', 3), ('L40', 2), ('H100', 1)], cpu_scale=0.75)
