// Fake fmha_bwd.hpp for ckfmha's host tests (tests/data/fake_ck/README.md).
#pragma once
#include "fmha_fwd.hpp"

struct fmha_bwd_args
{
    const void* q_ptr; const void* k_ptr; const void* v_ptr; const void* bias_ptr; const void* o_ptr;
    const void* lse_ptr; const void* do_ptr; void* d_ptr; void* rand_val_ptr; void* dq_ptr; void* dk_ptr;
    void* dv_ptr; void* dbias_ptr; void* dq_acc_ptr;
    ck_tile::index_t seqlen_q, seqlen_k, batch, max_seqlen_q, max_seqlen_k, hdim_q, hdim_v, nhead_q, nhead_k;
    float scale;
};
struct fmha_bwd_traits
{
    int hdim_q; int hdim_v; std::string data_type; bool is_group_mode; mask_enum mask_type; bias_enum bias_type;
    bool has_dbias; bool has_dropout; bool is_store_randval; bool is_deterministic;
};
template <int Version = 2>
float fmha_bwd(fmha_bwd_traits, fmha_bwd_args, const ck_tile::stream_config&);
