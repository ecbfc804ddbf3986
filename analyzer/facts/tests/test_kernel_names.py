"""Kernel categories decided on a kernel's own function name, never its template arguments: real kernel
names from many libraries (cuBLAS, cuDNN, CUTLASS, FlashAttention, Triton/inductor, tiny-cuda-nn, NCCL,
rocBLAS/hipBLASLt, Composable Kernel, AITER, thrust, PyTorch), each with where it was recorded."""
from __future__ import annotations

import pytest

from analyzer.facts.categories import categorize, load_categories
from analyzer.loading.kernel_names import kernel_function_name, split_kernel_name

# (name as the profiler recorded it, its function name, category, origin): names copied from the traces
# named (tests/data: see tests/data/MANIFEST.md; ../shared/traces-public: see its INDEX.md)
RECORDED = [
    # Nsight Compute's CSV writes PyTorch's <unnamed> namespace as "unnamed>"
    ("void unnamed>::cunn_SoftMaxForwardReg<BFloat16, float, BFloat16, unnamed>::SoftMaxForwardEpilogue, long, 4>"
     "(T3 *, const T1 *, T5)",
     'cunn_SoftMaxForwardReg', 'softmax', 'tests/data/ncu/naive_attention.raw.csv'),
    ('nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_bias_TNT',
     'nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_bias_TNT', 'gemm', 'tests/data/kineto/decode_b1_cudagraph_h200.pt.trace.json.xz'),
    ('sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x64x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas',
     'sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x64x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas', 'gemm', 'tests/data/host_sync.sqlite.xz'),
    ('cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0',
     'cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0', 'attention', 'tests/data/naive_attention_fixed.sqlite.xz'),
    ('cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1',
     'cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1', 'convolution', 'tests/data/public/hta_alexnet_single_pass.pt.trace.json.gz'),
    ('sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize64x128x32_stage5_warpsize2x2x1_g1_tensor16x8x16_execute_kernel_trt',
     'sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize64x128x32_stage5_warpsize2x2x1_g1_tensor16x8x16_execute_kernel_trt', 'convolution', '../shared/traces-public/LeiWang1999__memfusion_artifact__report1.sqlite'),
    ('void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)',
     'cudnn::ops::nchwToNhwcKernel', 'copy/memory', 'tests/data/public/hta_alexnet_single_pass.pt.trace.json.gz'),
    ('void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(T1::Params)',
     'cutlass::Kernel2', 'gemm', 'tests/data/fp32_gemm.sqlite.xz'),
    ('ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)',
     'ncclDevKernel_AllReduce_Sum_f32_RING_LL', 'communication', 'tests/data/ddp/ddp_exposed_comm_2gpu_rank0.sqlite.xz'),
    ('triton_poi_fused_0',
     'triton_poi_fused_0', 'elementwise', 'tests/data/public/tracelens_vllm_decode_graph_mi300x.pt.trace.json.gz'),
    ('triton_red_fused_add_mean_mul_pow_rsqrt_0',
     'triton_red_fused_add_mean_mul_pow_rsqrt_0', 'reduction', 'tests/data/public/tracelens_torch_compile_mi300x.pt.trace.json.gz'),
    ('triton_per_fused_native_layer_norm_0',
     'triton_per_fused_native_layer_norm_0', 'normalization', 'tests/data/kineto/compile_train_default_h200.pt.trace.json.xz'),
    ('triton_per_fused_sum_0',
     'triton_per_fused_sum_0', 'reduction', 'tests/data/kineto/compile_train_default_h200.pt.trace.json.xz'),
    ('Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA2_GRVWB2_GSUAMB_ISA90a_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_LPA8_LPB8_LPM0_LRVW4_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO1_SRVW0_SSO0_SVW1_TLDS1_USFGROn1_VSn1_VWA1_VWB1_WSGRA1_WSGRB1_WS64_WG64_4_1',
     'Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA2_GRVWB2_GSUAMB_ISA90a_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_LPA8_LPB8_LPM0_LRVW4_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO1_SRVW0_SSO0_SVW1_TLDS1_USFGROn1_VSn1_VWA1_VWB1_WSGRA1_WSGRB1_WS64_WG64_4_1', 'gemm', 'tests/data/public/hta_mi250_minitoy_rocm62.pt.trace.json.gz'),
    ('_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelineQRKSVSAsyncINS_36BlockFmhaBatchPrefillPipelineProblemIDF16bDF16bDF16bffDF16bhfDF16bfDF16bNS_13TileFmhaShapeINS_8sequenceIJLi128ELi128ELi32ELi128ELi32ELi128EEEENS5_IJLi4ELi1ELi1EEEENS5_IJLi32ELi32ELi16EEEES7_S8_Lb1EEELb1ENS_17ComposedAttentionILj0ELb1EEENS_30SimplifiedGenericAttentionMaskILb1EEELb0ELi1ENS_26TileFmhaBatchPrefillTraitsILb1ELb1ELb1ELb1ELb0ELNS_22BlockAttentionBiasEnumE0ELb0ELb0ELb0ELNS_28BlockAttentionQuantScaleEnumE0ELin1ELb0ELb0ELi1ELNS_37BlockAttentionKVCacheMemoryLayoutEnumE1ELNS_36BlockAttentionKVCacheLookupTableEnumE1ELNS_33BlockAttentionKVCacheLoadModeEnumE0EEEEENS_53BlockFmhaBatchPrefillPipelineQRKSVSAsyncDefaultPolicyEEENS_17Default2DEpilogueINS_24Default2DEpilogueProblemIfDF16bLb1ELb1ELb1EEEvEEEEJNSS_21FmhaFwdGroupModeKargsEEEEvDpT1_',
     'ck_tile::kentry', 'attention', 'tests/data/public/tracelens_sglang_prefill_mi300x.pt.trace.json.xz'),
    ('_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwdPipelineProblemIDF16bDF16bfDF16bDF16bDF16bffNS_19Generic2dBlockShapeINS_8sequenceIJLi1ELi3072EEEENS5_IJLi1ELi128EEEENS5_IJLi1ELi8EEEEEENS_18Rmsnorm2dFwdTraitsILb1ELb0ELb0ELb0ELNS_21Rmsnorm2dFusedAddEnumE0ELNS_23Rmsnorm2dFusedQuantEnumE0ELNS_22Rmsnorm2dSensitiveEnumE0EEEEENS_33Rmsnorm2dFwdPipelineDefaultPolicyEEENS_17Default2DEpilogueINS_24Default2DEpilogueProblemIfDF16bLb0ELb1ELb0EEEvEEEEJNSM_5KargsEEEEvDpT1_',
     'ck_tile::kentry', 'normalization', 'tests/data/public/tracelens_vllm_decode_graph_mi300x.pt.trace.json.gz'),
    ('_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib',
     'aiter::add_rmsnorm_quant_kernel', 'normalization', 'tests/data/public/tracelens_sglang_decode_mi300x.pt.trace.json.xz'),
    ('void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, false> >(__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16 const*, float, int const*, int const*, int const*, float const*, int, int, int, int, float*, float*, __hip_bfloat16*, float, float, float const*, float const*, float const*, ck_tile::ComposedAttention<0u, false> const*)',
     'paged_attention_ll4mi_QKV_mfma16_kernel', 'attention', 'tests/data/public/tracelens_sglang_decode_mi300x.pt.trace.json.xz'),
    ('void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)',
     'at::native::elementwise_kernel', 'copy/memory', 'tests/data/dataloader_starved.sqlite.xz'),
    ('void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<bool>, std::array<char *, (unsigned long)1>>(int, T2, T3)',
     'at::native::vectorized_elementwise_kernel', 'copy/memory', 'tests/data/naive_attention.sqlite.xz'),
    ('void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float, false>(int, float, c10::Half const*, c10::Half const*, c10::Half const*, float*, float*, c10::Half*)',
     'at::native::vectorized_layer_norm_kernel', 'normalization', 'tests/data/kineto/decode_b1_cudagraph_h200.pt.trace.json.xz'),
    ('void <unnamed>::softmax_warp_forward<float, float, float, (int)4, (bool)1, (bool)0>(T2 *, const T1 *, int, int, int, const bool *, int, bool)',
     'softmax_warp_forward', 'softmax', 'tests/data/host_sync.sqlite.xz'),
    ('void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, (int)4, (int)4>>(T3)',
     'at::native::reduce_kernel', 'reduction', 'tests/data/host_sync.sqlite.xz'),
    ('void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, float const*, float*, void*, long, float*, int*)',
     'splitKreduce_kernel', 'gemm', 'tests/data/public/param_resnet_no_profilerstep.pt.trace.json.xz'),
    ('void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__merge_sort::BlockSortAgent<int*, int*, long, cudf::row_lexicographic_comparator<false>, thrust::detail::integral_constant<bool, false>, thrust::detail::integral_constant<bool, true> >, bool, int*, int*, long, int*, int*, cudf::row_lexicographic_comparator<false> >(bool, int*, int*, long, int*, int*, cudf::row_lexicographic_comparator<false>)',
     'thrust::cuda_cub::core::_kernel_agent', 'sort', '../shared/traces-public/quasiben__nvtx-examples__cudf.sqlite'),]

# names from public sources outside our traces
PUBLISHED = [
    # FlashAttention 2 (Dao-AILab/flash-attention) as torch.profiler names it: a public op profile of a
    # video pipeline on a B300 (bf16, hdim 128), quoted verbatim
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
     "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, false, false, false, false, true, false, "
     "false>(flash::Flash_fwd_params)", "flash::flash_fwd_kernel", "attention"),
    # tiny-cuda-nn's fully fused MLP (NVlabs/tiny-cuda-nn, src/fully_fused_mlp.cu: template <int WIDTH, int
    # N_ITERS, typename OUT_T, Activation ACTIVATION, bool INFERENCE> kernel_mlp_fused(...)) written as nsys
    # demangles template arguments: issue 28's instant-ngp case, where `(?i)activation` matched the
    # template argument `(tcnn::Activation)0` and a tensor-core MLP was called elementwise
    ("void tcnn::kernel_mlp_fused<(int)64, (int)8, __half, (tcnn::Activation)0, (bool)0>(tcnn::Activation, "
     "const __half *, const __half *, T3 *, T3 *, unsigned int, unsigned int, unsigned int, unsigned int, "
     "unsigned int, nvcuda::wmma::layout_t, nvcuda::wmma::layout_t)", "tcnn::kernel_mlp_fused", "gemm"),
]


@pytest.mark.parametrize("name, function, category, origin", RECORDED, ids=[r[1][:40] for r in RECORDED])
def test_recorded_kernel_names(name, function, category, origin):
    assert kernel_function_name(name) == function
    assert categorize(name, "", load_categories()) == category, origin


@pytest.mark.parametrize("name, function, category", PUBLISHED, ids=["flash-attention-2", "tiny-cuda-nn"])
def test_published_kernel_names(name, function, category):
    assert kernel_function_name(name) == function
    assert categorize(name, "", load_categories()) == category


def test_template_arguments_never_decide_unless_a_launcher_declares_them():
    table = load_categories()
    name = PUBLISHED[1][0]
    function, args = split_kernel_name(name)
    assert "Activation" in args and "Activation" not in function
    # the activation pattern exists, and would have matched the whole name
    elementwise = next(c for c in table if c.name == "elementwise")
    assert any(p.search(name) for p in elementwise.patterns)
    assert categorize(name, "", table) != "elementwise"


def test_mangled_names_are_read_to_their_function():
    function, args = split_kernel_name("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8EEEvPT0_PT_")
    assert function == "aiter::add_rmsnorm_quant_kernel" and args.startswith("DF16b")
    assert split_kernel_name("_Z3fooPf") == ("foo", "")
    assert split_kernel_name("_Zgarbage") == ("_Zgarbage", "")


def test_a_huge_damaged_name_is_read_quickly():
    import time

    name = "void ns::k<" + "int, " * 400_000 + "float>(" + "int, " * 200_000 + "float)"
    t0 = time.perf_counter()
    function, _ = split_kernel_name(name)
    assert function == "ns::k" and time.perf_counter() - t0 < 2.0
    assert kernel_function_name("void f(int") == "f"  # an unbalanced (truncated) parameter list
