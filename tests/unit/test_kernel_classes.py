"""The profile's kernel classes: names from cuBLAS, CUTLASS, flash attention, Triton and aten land in the class a
reader expects, and a profile's seconds add up to its wall clock."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from ds_minimodel.train.kernel_classes import IDLE, OTHER, kernel_class, summarise_profile


@pytest.mark.parametrize("name,label", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NTN", "matmul"),
    ("aten::addmm", "matmul"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),  # attention before CUTLASS's matmul
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>", "optimizer"),
    ("aten::_foreach_mul_", "optimizer"),
    ("void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>", "norm/activation"),
    ("triton_per_fused_add_native_layer_norm_0", "norm/activation"),
    ("triton_tem_fused_mm_3", "matmul"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(...log_softmax...)", "loss"),
    ("void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>", "copy/cast"),
    ("aten::mul", OTHER),
])
def test_kernel_names_land_in_their_class(name, label):
    assert kernel_class(name) == label


def _event(key, cpu_us=0.0, cuda_us=0.0, device="DeviceType.CPU"):
    return SimpleNamespace(key=key, self_cpu_time_total=cpu_us, self_device_time_total=cuda_us, device_type=device)


def test_gpu_profiles_count_device_kernels_and_the_rest_is_idle():
    events = [_event("sm90_xmma_gemm_bf16", cuda_us=600_000, device="DeviceType.CUDA"),
              _event("flash_fwd_kernel", cuda_us=200_000, device="DeviceType.CUDA"),
              _event("aten::mm", cpu_us=900_000)]  # host time of a launch: not the device's
    found = summarise_profile(events, wall_s=1.0, cuda=True)
    assert found["seconds"]["matmul"] == pytest.approx(0.6) and found["seconds"]["attention"] == pytest.approx(0.2)
    assert found["seconds"][IDLE] == pytest.approx(0.2) and found["shares"]["matmul"] == pytest.approx(0.6)
    assert found["top"]["matmul"] == {"sm90_xmma_gemm_bf16": pytest.approx(0.6)}


def test_cpu_profiles_count_aten_operators_only():
    events = [_event("aten::addmm", cpu_us=300_000), _event("forward+loss", cpu_us=500_000),
              _event("aten::gelu", cpu_us=100_000)]
    found = summarise_profile(events, wall_s=0.5, cuda=False)
    assert found["busy_s"] == pytest.approx(0.4) and found["seconds"][IDLE] == pytest.approx(0.1)
    assert found["seconds"]["norm/activation"] == pytest.approx(0.1)
