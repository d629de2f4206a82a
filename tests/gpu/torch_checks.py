"""PyTorch under `gpuvisor run` (tests/gpu/run-gpu-tests.sh).

    torch_checks.py mem LIMIT_MIB     memory view and OutOfMemoryError at the limit
    torch_checks.py train SECONDS     a small training loop; prints "steps=N seconds=T rate=R"
    torch_checks.py matmul SECONDS [START]
                                      8192^3 bf16 products (GV_MATMUL_N=n for n^3) for
                                      SECONDS, starting at the
                                      wall-clock time START (seconds since the epoch) if
                                      given, so that tenants of a duel overlap exactly;
                                      prints "pid=P products=N seconds=T rate=R tflops=F"

Prints one "PASS name" / "FAIL name: why" line per check (mem).
"""
import os
import sys
import time

import torch

# torch.OutOfMemoryError since 2.1; torch.cuda.OutOfMemoryError before.
OOM = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def mem(limit_mib):
    fails = 0

    def check(ok, name, why=""):
        nonlocal fails
        print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why), flush=True)
        fails += 0 if ok else 1

    mib = 1 << 20
    free, total = torch.cuda.mem_get_info()
    check(total == limit_mib * mib, "torch.cuda.mem_get_info() total is the slice",
          f"total {total / mib:.0f} MiB, slice {limit_mib} MiB")
    check(free <= total, "mem_get_info() free within the slice", f"free {free / mib:.0f} MiB")
    blocks, raised = [], None
    try:
        while len(blocks) < 100000:
            blocks.append(torch.empty(64 * mib, dtype=torch.uint8, device="cuda"))
    except OOM as e:  # the framework's normal OOM error
        raised = e
    got = len(blocks) * 64
    check(raised is not None, "allocating past the slice raises torch.OutOfMemoryError")
    check(got <= limit_mib, "the caching allocator stays within the slice",
          f"held {got} MiB of {limit_mib} MiB")
    check(got >= limit_mib // 2, "most of the slice is usable", f"held {got} MiB of {limit_mib} MiB")
    del blocks
    torch.cuda.empty_cache()
    x = torch.empty(64 * mib, dtype=torch.uint8, device="cuda")
    check(x.numel() == 64 * mib, "allocation works again after the OOM")
    return 1 if fails else 0


def train(seconds):
    torch.manual_seed(0)
    # Large enough to keep the GPU busy (not bound by Python launching kernels),
    # so a compute share shows up in the step rate.
    model = torch.nn.Sequential(torch.nn.Linear(8192, 8192), torch.nn.ReLU(),
                                torch.nn.Linear(8192, 8192)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8192, 8192, device="cuda")
    y = torch.randn(8192, 8192, device="cuda")
    for _ in range(5):  # warm-up
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(4):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
        torch.cuda.synchronize()
    t = time.perf_counter() - t0
    print(f"steps={steps} seconds={t:.3f} rate={steps / t:.3f}", flush=True)
    return 0


def matmul(seconds, start_at=None):
    n = int(os.environ.get("GV_MATMUL_N", "8192"))
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):  # warm-up: cuBLAS heuristics, clocks
        c = a @ b
    torch.cuda.synchronize()
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(8):
            c = a @ b
        torch.cuda.synchronize()
        done += 8
    t = time.perf_counter() - t0
    del c
    print(f"pid={os.getpid()} products={done} seconds={t:.3f} rate={done / t:.3f} "
          f"tflops={2 * n ** 3 * done / t / 1e12:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "mem":
        sys.exit(mem(int(sys.argv[2])))
    if len(sys.argv) == 3 and sys.argv[1] == "train":
        sys.exit(train(float(sys.argv[2])))
    if len(sys.argv) in (3, 4) and sys.argv[1] == "matmul":
        sys.exit(matmul(float(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) == 4 else None))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
