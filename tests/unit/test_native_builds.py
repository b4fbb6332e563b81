"""The environment DeepSpeed's JIT op builds run in (train.distributed.native_build_env): every process of one
environment must build with the same ninja, or each rebuilds what the other built."""
from __future__ import annotations

import os
import sys

from ds_minimodel.train.distributed import native_build_env, own_ninja_first, readable_arch_list


def test_the_interpreters_own_ninja_comes_first_once(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv/bin"
    bin_dir.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    env = {"PATH": os.pathsep.join(["/usr/bin", "/bin"])}
    own_ninja_first(env)
    assert env["PATH"] == os.pathsep.join(["/usr/bin", "/bin"])  # no ninja beside the interpreter: left alone
    (bin_dir / "ninja").write_text("")
    own_ninja_first(env)
    assert env["PATH"].split(os.pathsep) == [str(bin_dir), "/usr/bin", "/bin"]
    env["PATH"] = os.pathsep.join(["/usr/bin", str(bin_dir), "/bin"])  # there, but behind the system's ninja
    own_ninja_first(env)
    own_ninja_first(env)
    assert env["PATH"].split(os.pathsep) == [str(bin_dir), "/usr/bin", "/bin"]
    env = {"TORCH_CUDA_ARCH_LIST": "9.0a"}  # no PATH at all, and an arch list DeepSpeed cannot read
    native_build_env(env)
    assert env == {"TORCH_CUDA_ARCH_LIST": "9.0", "PATH": str(bin_dir)}
    assert readable_arch_list({"TORCH_CUDA_ARCH_LIST": "8.6+PTX"}) is None
