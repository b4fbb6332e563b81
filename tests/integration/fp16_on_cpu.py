"""Run an entry script with DeepSpeed's fp16 device check lifted, so that fp16 training runs on a CPU.

DeepSpeed allows fp16 on a CPU only where oneDNN has fp16 kernels (AVX512-FP16/AMX machines); elsewhere it refuses
before building the engine. Everything after that check is DeepSpeed's own fp16 path: the engine casts the model to
half, the ZeRO optimizer keeps fp32 masters, scales the loss, detects overflow and skips steps. Lifting only the
check lets CI exercise that path (and ours around it) on any CPU; the same tests run natively on a GPU.

Usage: python tests/integration/fp16_on_cpu.py run_pretrain.py ARGS...
"""
import runpy
import sys

from deepspeed.accelerator import cpu_accelerator

cpu_accelerator.CPU_Accelerator.is_fp16_supported = lambda self: True
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
