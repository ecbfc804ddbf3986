"""Kernel categories on real library kernel names, and display-name shortening."""
from __future__ import annotations

import pandas as pd
import pytest

from analyzer.errors import InputError
from analyzer.facts.categories import classify_names, load_categories, shorten_kernel_name
from analyzer.facts.tests._build import store, trace

CASES = [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("ampere_sgemm_128x64_nn", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(T1::Params)", "gemm"),
    ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopB_NTN", "gemm"),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<const float>>", "gemm"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float>", "gemm"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4>, true>", "attention"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", "attention"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, const float*, int)", "softmax"),
    ("triton_per_fused__softmax_0", "softmax"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, const float*, const float*, const float*, float*, float*, float*)", "normalization"),
    ("triton_per_fused_native_layer_norm_0", "normalization"),
    ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>", "normalization"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>>(int, T2, T3)", "elementwise"),
    ("void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>>", "elementwise"),
    ("triton_poi_fused_add_mul_0", "elementwise"),
    ("void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>, at::native::FusedAdamMathFunctor<float, 4>>", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>>", "reduction"),
    ("triton_red_fused_sum_0", "reduction"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>>", "copy/memory"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>", "copy/memory"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1>>", "copy/memory"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "communication"),
    ("void rcclGenericKernel<1, false>(ncclDevKernelArgsStorage<4096ul>)", "communication"),  # was "other"
    ("sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize256x64x32_stage3_warpsize4x1x1_g1_tensor16x8x16_t1r3s3_execute_kernel_trt", "convolution"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, long, unsigned int>::Policy900, true, long>", "sort"),
    ("my_custom_kernel", "other"),
]


@pytest.mark.parametrize("name, category", CASES, ids=[c[1] + ":" + c[0][:40] for c in CASES])
def test_default_categories(name, category):
    table = load_categories(None)
    short = name.split("<")[0].split("(")[0].replace("void ", "").split("::")[-1]
    assert classify_names(pd.Series([name]), pd.Series([short]), table).tolist() == [category]


def test_category_summary_and_top_kernels():
    ks = [{"start": i * 10, "end": i * 10 + 5, "short_name": "ampere_sgemm_128x64_nn"} for i in range(4)]
    ks += [{"start": 100, "end": 120, "short_name": "triton_poi_fused_add_0"}]
    st = store(trace(kernels=ks))
    summary = st.get("category_summary").set_index("category")
    assert summary.loc["gemm", "total_ns"] == 20 and summary.loc["gemm", "count"] == 4
    assert summary["share"].sum() == pytest.approx(1.0)
    top = st.get("top_kernels")
    assert top["name"].tolist() == ["ampere_sgemm_128x64_nn", "triton_poi_fused_add_0"]  # ties: 20 ns each
    assert top["median_ns"].tolist() == [5, 20]


def test_categories_file_option(tmp_path):
    custom = tmp_path / "cats.yaml"
    custom.write_text("categories:\n  - name: mine\n    patterns: ['^my_']\n")
    ks = [{"start": 0, "end": 5, "short_name": "my_custom_kernel"}]
    st = store(trace(kernels=ks), categories_file=str(custom))
    assert st.get("kernel_categories")["category"].tolist() == ["mine"]


@pytest.mark.parametrize("content, message", [
    ("categories: 3\n", "top-level 'categories:' list"),
    ("categories:\n  - name: x\n    patterns: ['(']\n", "bad pattern"),
    ("categories: [\n", "not valid YAML"),
])
def test_bad_category_files(tmp_path, content, message):
    bad = tmp_path / f"bad{abs(hash(content))}.yaml"
    bad.write_text(content)
    with pytest.raises(InputError, match=message):
        load_categories(str(bad))


def test_shorten_kernel_name():
    long = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1>>(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
    short = shorten_kernel_name(long, max_len=100)
    assert short == "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<...>, at::detail::Array<...>>"
    assert shorten_kernel_name(long).endswith("...") and len(shorten_kernel_name(long)) == 80
    assert shorten_kernel_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)") \
        == "at::native::cunn_SoftMaxForward<4, float>"
    assert shorten_kernel_name("ampere_sgemm_128x64_nn") == "ampere_sgemm_128x64_nn"
    assert len(shorten_kernel_name("x" * 200)) == 80


def test_category_table_alias_bomb_is_refused(tmp_path):
    """A user's category table is read like a rule file: aliases (billion laughs) are refused."""
    from analyzer.errors import InputError
    from analyzer.facts.categories import load_categories

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n"
                    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n"
                              for i in range(8))
                    + "categories: *i\n")
    with pytest.raises(InputError, match="alias"):
        load_categories(bomb)


@pytest.mark.parametrize("name", ["round3/decode_eager_fixed", "round3/compile_train_fixed"])
def test_whole_graph_executions_are_their_own_category(name):
    """nsys --cuda-graph-trace=graph records each replay as one row named "CUDA graph N": the kernel
    summaries and the timeline breakdown's compute time call it cuda_graph, never other."""
    from analyzer.facts.categories import GRAPH_CATEGORY
    from analyzer.loading.model import GRAPH_EXECUTION
    from analyzer.pipeline import analyze_trace
    from analyzer.testing import real_trace

    a = analyze_trace(real_trace(name))
    k = a.facts.get("kernel_categories")
    whole = k["in_graph"].to_numpy() == GRAPH_EXECUTION
    assert whole.any() and k["name"][whole].astype(str).str.startswith("CUDA graph ").all()
    assert (k["category"][whole] == GRAPH_CATEGORY).all() and (k["category"][~whole] != GRAPH_CATEGORY).all()
    summary = a.facts.get("category_summary").set_index("category")
    assert summary.loc[GRAPH_CATEGORY, "count"] == whole.sum()
    assert "other" not in summary.index
    bd = a.facts.get("timeline_breakdown")
    compute = bd[(bd["scope"] == "window") & (bd["cause"] == "compute")].set_index("detail")["duration_ns"]
    assert compute.get(GRAPH_CATEGORY, 0) > 0 and "other" not in compute.index
    phases = a.facts.get("top_kernels")
    assert set(phases.loc[phases["name"].astype(str).str.startswith("CUDA graph "), "category"]) == {GRAPH_CATEGORY}


def test_categories_found_once_per_table_give_what_matching_gives(monkeypatch):
    """classify_codes keeps each (name, short name)'s category per category table: a second trace's
    kernels (here the same trace again) take them from there, and every one equals categorize's."""
    from analyzer.facts import categories as cat
    from analyzer.loading import load_trace
    from analyzer.testing import real_trace

    kernels = load_trace(real_trace("small_training_ctx128")).kernels
    table = load_categories()
    cat._KNOWN.clear()
    first = cat.classify_names(kernels["name"], kernels["short_name"], table)
    known = cat._known_categories(table)
    assert len(known) == kernels["name"].nunique() > 5
    for (name, short), category in known.items():
        assert cat.categorize(name, short, table) == category
    calls: list[str] = []
    real = cat.categorize
    monkeypatch.setattr(cat, "categorize", lambda *a: calls.append(a[0]) or real(*a))
    again = cat.classify_names(kernels["name"], kernels["short_name"], table)
    assert not calls and list(again) == list(first)
