"""A fixed CI subset of the ONNX backend node tests (onnx.backend.test.case.node), run by
`bench/onnx_node_tests.py`'s runner on ember's numpy and cpu devices: each case's outputs against the
reference outputs the onnx package ships with it (rtol 1e-3, atol 1e-4, NaN equal, dtype and shape
equal). The whole suite, beside onnxruntime, is `python -m bench.onnx_node_tests`."""

from __future__ import annotations

import pytest

import ember
from bench.onnx_node_tests import attempt, node_cases, run_ember

# One or two cases of each op type ember passes in every case of the full suite (323 cases).
CASES = [
    "test_abs", "test_acos_example", "test_acosh_example", "test_add", "test_add_int16",
    "test_affine_grid_2d", "test_affine_grid_3d", "test_and2d", "test_and_bcast3v2d",
    "test_argmax_no_keepdims_example", "test_argmax_no_keepdims_example_select_last_index",
    "test_argmin_no_keepdims_example", "test_argmin_no_keepdims_example_select_last_index",
    "test_asin_example", "test_asinh_example", "test_atan_example", "test_atanh_example", "test_attention_4d",
    "test_attention_3d_causal", "test_averagepool_2d_precomputed_pads", "test_averagepool_3d_default",
    "test_batchnorm_example", "test_batchnorm_example_training_mode", "test_bitshift_right_uint8",
    "test_bitshift_right_int32_negative_input", "test_bitwise_and_i32_2d", "test_bitwise_not_2d",
    "test_bitwise_or_i32_2d", "test_bitwise_xor_i32_2d", "test_blackmanwindow", "test_cast_FLOAT_to_FLOAT16",
    "test_cast_FLOAT16_to_DOUBLE", "test_castlike_FLOAT_to_FLOAT16", "test_castlike_FLOAT16_to_DOUBLE",
    "test_causal_conv_with_state_basic", "test_causal_conv_with_state_kernel_size_one", "test_ceil_example",
    "test_celu", "test_center_crop_pad_crop", "test_center_crop_pad_crop_axes_hwc", "test_clip_example",
    "test_clip_default_min", "test_col2im", "test_col2im_pads", "test_compress_0",
    "test_compress_default_axis", "test_concat_1d_axis_0", "test_concat_3d_axis_0", "test_constant",
    "test_constantofshape_float_ones", "test_basic_conv_with_padding", "test_conv_with_strides_no_padding",
    "test_convinteger_without_padding", "test_convtranspose", "test_convtranspose_kernel_shape",
    "test_cos_example", "test_cosh_example", "test_cumprod_1d", "test_cumprod_2d_axis_0", "test_cumsum_1d",
    "test_cumsum_2d_axis_0", "test_depthtospace_example", "test_dequantizelinear",
    "test_dequantizelinear_int16", "test_div_example", "test_div_int16", "test_dropout_default",
    "test_training_dropout_zero_ratio", "test_dynamicquantizelinear", "test_einsum_transpose",
    "test_einsum_batch_matmul_bfloat16", "test_elu_example", "test_equal", "test_equal_int16", "test_erf",
    "test_exp_example", "test_expand_dim_changed", "test_eyelike_without_dtype", "test_flatten_axis0",
    "test_flatten_default_axis", "test_flexattention", "test_flexattention_prob_mod", "test_floor_example",
    "test_gru_defaults", "test_gru_batchwise", "test_gather_0", "test_gather_2d_indices",
    "test_gather_elements_0", "test_gathernd_example_int32", "test_gelu_tanh_1", "test_gelu_default_1",
    "test_gemm_default_zero_bias", "test_gemm_default_matrix_bias", "test_globalaveragepool",
    "test_globalmaxpool", "test_greater", "test_greater_int16", "test_greater_equal",
    "test_greater_equal_int16", "test_gridsample", "test_gridsample_nearest_align_corners_0_additional_1",
    "test_group_normalization_example", "test_hammingwindow", "test_hannwindow", "test_hardsigmoid_example",
    "test_hardswish", "test_hardmax_example", "test_hardmax_axis_1", "test_identity", "test_if",
    "test_instancenorm_example", "test_isinf", "test_isinf_negative", "test_isnan", "test_lrn",
    "test_lstm_defaults", "test_lstm_batchwise", "test_layer_normalization_4d_axis0",
    "test_layer_normalization_2d_axis0", "test_leakyrelu_example", "test_less", "test_less_int16",
    "test_less_equal", "test_less_equal_int16", "test_linear_attention_linear",
    "test_linear_attention_gated_delta_mqa", "test_log_example", "test_logsoftmax_example_1",
    "test_logsoftmax_axis_1", "test_loop11", "test_l2normalization_axis_1", "test_l1normalization_axis_1",
    "test_lppool_1d_default", "test_lppool_2d_same_upper", "test_matmul_2d", "test_matmul_bcast",
    "test_matmulinteger", "test_max_example", "test_max_int32", "test_maxpool_2d_uint8",
    "test_maxpool_2d_same_lower", "test_mean_example", "test_mvn", "test_min_example", "test_min_int32",
    "test_mish", "test_mod_mixed_sign_float64", "test_mod_float_edge_cases_fmod_0_float64",
    "test_mul_example", "test_mul_int16", "test_neg_example", "test_nllloss_NC", "test_nllloss_NCd1",
    "test_nonzero_example", "test_not_2d", "test_onehot_without_axis", "test_onehot_out_of_range_indices",
    "test_optional_get_element_optional_tensor", "test_optional_get_element_optional_sequence",
    "test_optional_has_element_tensor_input", "test_optional_has_element_empty_no_input_tensor_input",
    "test_or2d", "test_or_bcast3v2d", "test_prelu_example", "test_constant_pad", "test_wrap_pad",
    "test_pow_example", "test_pow_types_int64_float32", "test_qlinearconv",
    "test_qlinearmatmul_2D_uint8_float32", "test_qlinearmatmul_2D_int8_float32", "test_quantizelinear",
    "test_quantizelinear_int16", "test_rms_normalization_4d_axis0", "test_rms_normalization_2d_axis0",
    "test_simple_rnn_defaults", "test_simple_rnn_batchwise", "test_range_float_type_positive_delta",
    "test_range_bfloat16_type_positive_delta", "test_reciprocal_example",
    "test_reduce_l1_do_not_keepdims_example", "test_reduce_l1_default_axes_keepdims_example",
    "test_reduce_l2_do_not_keepdims_example", "test_reduce_l2_default_axes_keepdims_example",
    "test_reduce_log_sum_desc_axes", "test_reduce_log_sum_default",
    "test_reduce_log_sum_exp_do_not_keepdims_example",
    "test_reduce_log_sum_exp_default_axes_keepdims_example", "test_reduce_max_do_not_keepdims_example",
    "test_reduce_max_default_axes_keepdims_random", "test_reduce_mean_do_not_keepdims_example",
    "test_reduce_mean_default_axes_keepdims_example", "test_reduce_min_do_not_keepdims_example",
    "test_reduce_min_default_axes_keepdims_random", "test_reduce_prod_do_not_keepdims_example",
    "test_reduce_prod_default_axes_keepdims_example", "test_reduce_sum_do_not_keepdims_example",
    "test_reduce_sum_negative_axes_keepdims_example", "test_reduce_sum_square_do_not_keepdims_example",
    "test_reduce_sum_square_default_axes_keepdims_example", "test_relu", "test_reshape_reordered_all_dims",
    "test_reshape_negative_dim", "test_resize_upsample_scales_nearest",
    "test_resize_downsample_sizes_linear_pytorch_half_pixel", "test_reversesequence_time",
    "test_rotary_embedding", "test_rotary_embedding_with_interleaved_rotary_dim", "test_round",
    "test_scan9_sum", "test_scatter_without_axis", "test_scatter_elements_without_axis",
    "test_scatter_elements_with_duplicate_indices", "test_scatternd", "test_scatternd_max",
    "test_selu_example", "test_sequence_insert_at_back", "test_sequence_map_identity_1_sequence",
    "test_sequence_map_add_2_sequences", "test_shape_example", "test_shape_end_negative_1",
    "test_shrink_hard", "test_sigmoid_example", "test_sign", "test_sin_example", "test_sinh_example",
    "test_size_example", "test_slice", "test_slice_default_axes", "test_softmax_example",
    "test_softmax_axis_1", "test_sce_none", "test_sce_mean_weight_ii_3d_log_prob", "test_softplus_example",
    "test_softsign_example", "test_spacetodepth", "test_spacetodepth_dcr_mode_example",
    "test_split_equal_parts_1d_opset13", "test_split_variable_parts_1d_opset18", "test_split_to_sequence_1",
    "test_sqrt_example", "test_squeeze", "test_sub_example", "test_sub_int16", "test_sum_example",
    "test_swiglu", "test_swish", "test_tan_example", "test_tanh_example", "test_thresholdedrelu_example",
    "test_tile", "test_top_k", "test_top_k_same_values_2d", "test_transpose_default",
    "test_transpose_all_permutations_2", "test_triu", "test_tril", "test_unique_sorted_without_axis",
    "test_unique_sorted_with_axis_3d", "test_unsqueeze_axis_0", "test_unsqueeze_two_axes",
    "test_upsample_nearest", "test_where_example", "test_xor2d", "test_xor_bcast3v2d",
    # element types ember holds in another dtype (uint16/32/64, float8/4, int4/2), strings on the host
    "test_add_uint32", "test_sub_uint64", "test_mul_uint16", "test_div_uint32", "test_mod_uint64",
    "test_bitshift_left_uint16", "test_bitwise_not_3d", "test_bitwise_and_ui64_bcast_3v1d",
    "test_greater_uint32", "test_less_equal_uint64", "test_max_uint16", "test_pow_types_float32_uint32",
    "test_top_k_uint64", "test_equal_string", "test_cast_FLOAT_to_FLOAT8E4M3FN",
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2", "test_cast_INT4_to_FLOAT", "test_cast_FLOAT_to_UINT4",
    "test_cast_FLOAT_to_FLOAT4E2M1", "test_cast_e8m0_FLOAT_to_FLOAT8E8M0",
    "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ", "test_castlike_FLOAT_to_BFLOAT16", "test_quantizelinear_int4",
    "test_quantizelinear_e4m3fn", "test_quantizelinear_uint16", "test_dequantizelinear_e4m3fn",
    "test_dequantizelinear_uint4", "test_bitcast_float32_to_int32", "test_bitcast_uint16_to_int16",
    # ops and attributes added with them
    "test_col2im_5d", "test_einsum_batch_diagonal", "test_gridsample_bicubic",
    "test_gridsample_bicubic_align_corners_1_additional_1", "test_maxpool_with_argmax_2d_precomputed_strides",
    "test_averagepool_2d_ceil_last_window_starts_on_pad", "test_l2normalization_axis_0", "test_scan_sum",
    "test_training_dropout_mask", "test_adagrad", "test_adam_multiple", "test_nesterov_momentum",
    "test_string_concat_broadcasting", "test_string_split_maxsplit",
    "test_strnormalizer_export_monday_casesensintive_lower", "test_regex_full_match_email_domain",
    "test_ai_onnx_ml_label_encoder_string_int", "test_ai_onnx_ml_label_encoder_tensor_mapping",
    "test_ai_onnx_ml_array_feature_extractor", "test_ai_onnx_ml_binarizer", "test_dft_inverse",
    "test_dft_irfft", "test_dft_rfft_opset19", "test_stft_with_window", "test_det_nd",
    "test_nonmaxsuppression_two_batches", "test_nonmaxsuppression_center_point_box_format",
    "test_maxunpool_export_with_output_shape", "test_tensorscatter_circular",
]
# The cpu device compiles a kernel per new op and dtype: a quarter of the cases keeps CI time low.
CPU_CASES = CASES[::4]


@pytest.fixture(scope="module")
def cases():
    by_name = {c.name: c for c in node_cases()}
    return by_name


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_node_cases_match_the_reference_outputs(cases, device):
    ember.Device(device)
    names = CASES if device == "numpy" else CPU_CASES
    missing = [n for n in names if n not in cases]
    assert not missing, f"cases no longer in the onnx package: {missing}"
    failed = []
    for name in names:
        ok, why = attempt(lambda c: run_ember(c, device), cases[name])
        if not ok:
            failed.append(f"{name}: {why}")
    assert not failed, f"{len(failed)} of {len(names)} cases fail on {device}:\n" + "\n".join(failed)
