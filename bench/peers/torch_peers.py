"""Peer anchors on the lent GPU: PyTorch eager / torch.compile AMP step times for the seed workloads.
Prints one JSON line per configuration and a table at the end."""
import json, os, sys, time, math
import torch, torch.nn as nn, torch.nn.functional as F

dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
results = []

def timed(step, warm=10, iters=30):
    for _ in range(warm): step()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = []
    for _ in range(3):
        s.record()
        for _ in range(iters): step()
        e.record(); torch.cuda.synchronize()
        reps.append(s.elapsed_time(e) / iters)
    reps.sort()
    return reps[1]

def libraries():
    """The PyTorch and cuDNN this peer ran on: a library path can make
    PyTorch load another cuDNN than its own (ampjit addition)."""
    try: cudnn = torch.backends.cudnn.version()
    except Exception as ex: cudnn = "unusable: " + repr(ex)[:160]
    return {"torch": torch.__version__, "cudnn": cudnn}

def peaks():
    out = {}
    for dt, name in [(torch.bfloat16, "bf16"), (torch.float16, "fp16"), (torch.float32, "fp32")]:
        a = torch.randn(8192, 8192, device=dev, dtype=dt); b = torch.randn(8192, 8192, device=dev, dtype=dt)
        ms = timed(lambda: a @ b, warm=3, iters=10)
        out[name + "_tflops"] = 2 * 8192**3 / ms / 1e9
    x = torch.randn(1 << 29, device=dev); y = torch.empty_like(x)
    ms = timed(lambda: y.copy_(x), warm=3, iters=10)
    out["d2d_GBps"] = 2 * x.numel() * 4 / ms / 1e6
    return out

def mlp9(): return nn.Sequential(*[nn.Linear(8192, 8192) for _ in range(9)])
def mnist(): return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
def resnet():
    import torchvision
    return torchvision.models.resnet50(num_classes=10)

WORK = {
    "mlp9":   (mlp9,   lambda: (torch.rand(2048, 8192, device=dev), torch.rand(2048, 8192, device=dev)), nn.MSELoss(), 1e-4),
    "mnist":  (mnist,  lambda: (torch.randn(64, 1, 28, 28, device=dev), torch.randint(0, 10, (64,), device=dev)), nn.CrossEntropyLoss(), 1e-2),
    "resnet50_cifar": (resnet, lambda: (torch.randn(128, 3, 32, 32, device=dev), torch.randint(0, 10, (128,), device=dev)), nn.CrossEntropyLoss(), 1e-2),
}

def optimizer(name, params, lr, **graph):
    """The anchors' plain SGD, or torch.optim's fused Adam/AdamW at PyTorch's
    default lr, PyTorch's fastest single-GPU Adam (ampjit addition)."""
    if name == "sgd": return torch.optim.SGD(params, lr=lr)
    adam = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    return adam(params, lr=1e-3, fused=True, **graph)

def run(work, mode, compile_mode=None, optimizer_name="sgd"):
    make, data, lossf, lr = WORK[work]
    torch.manual_seed(0)
    model = make().to(dev)
    if work.startswith("resnet"): model = model.to(memory_format=torch.channels_last)
    opt = optimizer(optimizer_name, model.parameters(), lr)
    x, y = data()
    dtype = {"fp32": None, "amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}[mode]
    scaler = torch.amp.GradScaler("cuda", enabled=(mode == "amp_fp16"))
    fwd = model
    if compile_mode:
        fwd = torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = lossf(fwd(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt); scaler.update()
    t0 = time.time()
    ms = timed(step, warm=15 if compile_mode else 10)
    r = {"work": work, "mode": mode, "compile": compile_mode or "eager", "optimizer": optimizer_name, "ms_per_step": round(ms, 4), "wall_s": round(time.time() - t0, 1), **libraries()}
    print(json.dumps(r), flush=True); results.append(r)

if __name__ == "__main__":
    # Copied from the team's shared anchors; the additions are libraries() in each result, optimizer()
    # and `--only WORK MODE COMPILE [sgd|adam|adamw]`, which ampjit-bench uses to run the matching
    # configuration in the same run as its own measurement (no device-peaks preamble).
    if len(sys.argv) in (5, 6) and sys.argv[1] == "--only":
        w, m, c = sys.argv[2], sys.argv[3], sys.argv[4]
        print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
        run(w, m, None if c == "eager" else c, sys.argv[5] if len(sys.argv) == 6 else "sgd")
        sys.exit(0)
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, **peaks()}), flush=True)
    plan = []
    for w in WORK:
        for m in ["fp32", "amp_fp16", "amp_bf16"]:
            plan.append((w, m, None))
        if which == "all":
            plan.append((w, "amp_fp16", "default"))
            plan.append((w, "amp_bf16", "default"))
            if w == "mnist": plan.append((w, "amp_fp16", "reduce-overhead"))
    for w, m, c in plan:
        try: run(w, m, c)
        except Exception as ex:
            print(json.dumps({"work": w, "mode": m, "compile": c, "error": repr(ex)[:300]}), flush=True)
    print("\n%-16s %-9s %-16s %10s" % ("work", "mode", "compile", "ms/step"))
    for r in results: print("%-16s %-9s %-16s %10.3f" % (r["work"], r["mode"], r["compile"], r["ms_per_step"]))
