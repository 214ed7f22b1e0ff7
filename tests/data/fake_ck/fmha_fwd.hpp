// Fake fmha_fwd.hpp for ckfmha's host tests (tests/data/fake_ck/README.md): the members the tests use, with CK's
// types (ck_tile::index_t = int32_t; mask/bias/rope enums as example/ck_tile/01_fmha/{mask,bias,rotary}.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <hip/hip_runtime.h>

namespace ck_tile {
using index_t = int32_t;
struct stream_config
{
    hipStream_t stream_id_ = nullptr;
    bool time_kernel_      = false;
    int log_level_         = 0;
    int cold_niters_       = 3;
    int nrepeat_           = 10;
    bool is_gpu_timer_     = true;
    bool flush_cache_      = false;
    int rotating_count_    = 1;
};
} // namespace ck_tile

enum class mask_enum { no_mask = 0, mask_top_left, mask_bottom_right, window_generic };
enum class bias_enum { no_bias = 0, elementwise_bias = 1, alibi = 2 };
enum class rope_enum { none = 0, interleaved = 1, half_rotated = 2 };
#if FAKE_CK_NEW
enum class quant_scale_enum { no_scale = 0, pertensor = 1, blockscale = 2, kv_blockscale = 3, mx = 4 };
#endif

struct fmha_fwd_args
{
    const void* q_ptr;
    const void* k_ptr;
    const void* v_ptr;
    const void* bias_ptr;
    void* rand_val_ptr;
    void* lse_ptr;
    void* o_ptr;
#if FAKE_CK_NEW
    const void* sink_ptr = nullptr;
#endif
    const void* seqstart_q_ptr = nullptr;
    const void* seqstart_k_ptr = nullptr;
    const void* seqlen_q_ptr = nullptr;
    const void* seqlen_k_ptr = nullptr;
    const void* cu_seqlen_q_ptr = nullptr;
    const void* cu_seqlen_k_ptr = nullptr;
    ck_tile::index_t seqlen_q, seqlen_k, batch, max_seqlen_q, hdim_q, hdim_v, nhead_q, nhead_k;
    float scale_s, scale_p, scale_o, logits_soft_cap;
    ck_tile::index_t stride_q, stride_k, stride_v, stride_bias, stride_randval, stride_o;
    ck_tile::index_t nhead_stride_q, nhead_stride_k, nhead_stride_v, nhead_stride_bias, nhead_stride_randval,
        nhead_stride_lse, nhead_stride_o;
    ck_tile::index_t batch_stride_q, batch_stride_k, batch_stride_v, batch_stride_bias, batch_stride_randval,
        batch_stride_lse, batch_stride_o;
    ck_tile::index_t window_size_left, window_size_right, mask_type, min_seqlen_q;
    float p_drop;
    bool s_randval;
    std::variant<std::pair<uint64_t, uint64_t>, std::pair<const void*, const void*>> drop_seed_offset;
};

struct fmha_fwd_traits
{
    int hdim_q;
    int hdim_v;
    std::string data_type;
    bool is_group_mode;
    bool is_v_rowmajor;
    bool has_logits_soft_cap;
    mask_enum mask_type;
    bias_enum bias_type;
    bool has_lse;
    bool has_dropout;
#if FAKE_CK_NEW
    quant_scale_enum qscale_type;
    bool has_sink = false;
#else
    bool do_fp8_static_quant;
#endif
    bool skip_min_seqlen_q = false;
};
float fmha_fwd(fmha_fwd_traits, fmha_fwd_args, const ck_tile::stream_config&);

// The other apis: declared with the names and shapes the wrapper uses (their members are not exercised).
struct fmha_fwd_splitkv_args : fmha_fwd_args { void* lse_acc_ptr; void* o_acc_ptr; ck_tile::index_t num_splits; };
struct fmha_fwd_splitkv_traits : fmha_fwd_traits {};
float fmha_fwd_splitkv(fmha_fwd_splitkv_traits, fmha_fwd_splitkv_args, const ck_tile::stream_config&);
struct fmha_fwd_pagedkv_args : fmha_fwd_args { void* block_table_ptr; ck_tile::index_t page_block_size; };
struct fmha_fwd_pagedkv_traits : fmha_fwd_traits { bool use_pagedkv = true; };
float fmha_fwd_pagedkv(fmha_fwd_pagedkv_traits&, fmha_fwd_pagedkv_args&, const ck_tile::stream_config&);
struct fmha_fwd_appendkv_args { void* q_ptr; void* k_ptr; const void* knew_ptr; void* v_ptr; const void* vnew_ptr;
    ck_tile::index_t seqlen_q, seqlen_knew, batch, hdim_q, hdim_v, nhead_q, nhead_k, rotary_dim; bool has_mask; };
struct fmha_fwd_appendkv_traits { int hdim_q; int hdim_v; std::string data_type; bool is_v_rowmajor; rope_enum rope_type; };
float fmha_fwd_appendkv(fmha_fwd_appendkv_traits, fmha_fwd_appendkv_args, const ck_tile::stream_config&);
struct fmha_batch_prefill_args : fmha_fwd_args { int32_t num_total_pages; void* kv_indptr; void* kv_page_indices; };
using fmha_batch_prefill_traits = fmha_fwd_traits;
float fmha_batch_prefill(fmha_batch_prefill_traits, fmha_batch_prefill_args, const ck_tile::stream_config&);
