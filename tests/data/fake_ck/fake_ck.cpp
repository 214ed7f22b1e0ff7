// Fake CK api functions for ckfmha's host tests (tests/data/fake_ck/README.md).
#include "fmha_bwd.hpp"
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace {
float env_return()
{
    if(std::getenv("FAKE_CK_THROW"))
        throw std::runtime_error("fake CK exception");
    const char* r = std::getenv("FAKE_CK_RETURN");
    return r ? static_cast<float>(std::atof(r)) : 0.0f;
}
size_t elem_bytes(const std::string& t) { return t == "fp32" ? 4 : (t == "fp16" || t == "bf16") ? 2 : 1; }
} // namespace

float fmha_fwd(fmha_fwd_traits t, fmha_fwd_args a, const ck_tile::stream_config&)
{
    const float r = env_return();
    if(r < 0)
        return r;
    const size_t es = elem_bytes(t.data_type);
    auto* o = static_cast<char*>(a.o_ptr);
    auto* q = static_cast<const char*>(a.q_ptr);
    for(int64_t b = 0; b < a.batch; ++b)
        for(int64_t h = 0; h < a.nhead_q; ++h)
            for(int64_t s = 0; s < a.seqlen_q; ++s)
            {
                for(int64_t d = 0; d < a.hdim_v; ++d)
                {
                    const int64_t oi = b * a.batch_stride_o + h * a.nhead_stride_o + s * a.stride_o + d;
                    const int64_t qi = b * a.batch_stride_q + h * a.nhead_stride_q + s * a.stride_q + d;
                    std::memcpy(o + oi * es, q + qi * es, es);
                }
                if(t.has_lse && a.lse_ptr)
                    static_cast<float*>(a.lse_ptr)[b * a.batch_stride_lse + h * a.nhead_stride_lse + s] =
                        static_cast<float>(s);
            }
    return r;
}
float fmha_fwd_splitkv(fmha_fwd_splitkv_traits, fmha_fwd_splitkv_args, const ck_tile::stream_config&) { return env_return(); }
float fmha_fwd_pagedkv(fmha_fwd_pagedkv_traits&, fmha_fwd_pagedkv_args&, const ck_tile::stream_config&) { return env_return(); }
float fmha_fwd_appendkv(fmha_fwd_appendkv_traits, fmha_fwd_appendkv_args, const ck_tile::stream_config&) { return env_return(); }
float fmha_batch_prefill(fmha_batch_prefill_traits, fmha_batch_prefill_args, const ck_tile::stream_config&) { return env_return(); }
// returns the softmax scale it was given (unless FAKE_CK_RETURN says otherwise): the caller sees that it arrived
template <>
float fmha_bwd<2>(fmha_bwd_traits, fmha_bwd_args a, const ck_tile::stream_config&)
{
    const float r = env_return();
    return r != 0 ? r : a.scale;
}
