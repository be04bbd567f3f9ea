// libtodre quickstart (C++): the same selection as examples/c/quickstart.c,
// with the C handles owned by std::unique_ptr, arrays passed as DLPack views
// (HostView) and failures turned into exceptions. Copy the wrappers
// (namespace todre_cpp) into your project.
//
// Build: c++ -std=c++17 quickstart.cpp $(pkg-config --cflags --libs todre)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <todre/todre.h>

namespace todre_cpp {

// Throws with the library's detail message, which names the bad argument.
inline void check(todre_status status, const char *what)
{
    if (status != TODRE_OK)
        throw std::runtime_error(std::string(what) + ": " + todre_status_string(status) + ": " +
                                 todre_last_error());
}

template <class T, void (*Destroy)(T *)>
struct Deleter {
    void operator()(T *handle) const { Destroy(handle); }
};
using Context = std::unique_ptr<todre_context, Deleter<todre_context, todre_context_destroy>>;
using SelectConfig =
    std::unique_ptr<todre_select_config, Deleter<todre_select_config, todre_select_config_destroy>>;

// backend: "cpu", "cuda", or "auto" (a GPU backend that can run here, else the CPU).
inline Context make_context(const char *backend, int device = 0)
{
    todre_context *ctx = nullptr;
    check(todre_context_create(backend, device, &ctx), "todre_context_create");
    return Context(ctx);
}

inline SelectConfig make_select_config()
{
    todre_select_config *cfg = nullptr;
    check(todre_select_config_create(&cfg), "todre_select_config_create");
    return SelectConfig(cfg);
}

constexpr DLDataType kF16{kDLFloat, 16, 1}, kF32{kDLFloat, 32, 1}, kI64{kDLInt, 64, 1};

// A DLPack view of a contiguous host buffer (what a framework's DLPack export
// gives you). It owns its shape, which the DLTensor points to, so it is
// neither copied nor moved; the buffer must outlive it. Nothing is allocated
// by the library per array.
class HostView {
public:
    HostView(const void *data, DLDataType dtype, std::vector<int64_t> shape)
        : shape_(std::move(shape))
    {
        tensor_.data = const_cast<void *>(data); // the library writes only outputs
        tensor_.device = DLDevice{kDLCPU, 0};
        tensor_.ndim = static_cast<int32_t>(shape_.size());
        tensor_.dtype = dtype;
        tensor_.shape = shape_.data();
        tensor_.strides = nullptr; // compact row-major
        tensor_.byte_offset = 0;
    }
    HostView(const HostView &) = delete;
    HostView &operator=(const HostView &) = delete;
    const DLTensor *get() const { return &tensor_; }

private:
    std::vector<int64_t> shape_;
    DLTensor tensor_{};
};

} // namespace todre_cpp

namespace {

constexpr int64_t kTokens = 2880, kThumbnail = 576, kDim = 256;

// float -> IEEE binary16 bits, round to nearest even (values in [-1, 1]; tiny
// ones flush to zero). Real f16 data from a model needs no conversion.
uint16_t f16_from_float(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
    const int32_t exp = static_cast<int32_t>((x >> 23) & 0xffu) - 127 + 15;
    if (exp <= 0)
        return static_cast<uint16_t>(sign);
    if (exp >= 31)
        return static_cast<uint16_t>(sign | 0x7c00u);
    uint16_t h = static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13));
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        ++h;
    return h;
}

// Deterministic stand-in for a projector's output: 40 clusters plus noise.
void make_tokens(std::vector<uint16_t> &emb, std::vector<float> &cls)
{
    uint32_t state = 12345;
    for (int64_t i = 0; i < kTokens; i++) {
        const int64_t cluster = (i * 7) % 40;
        for (int64_t j = 0; j < kDim; j++) {
            state = state * 1664525u + 1013904223u;
            const float noise = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
            const float base = static_cast<float>((cluster * 31 + j * 17) % 13) / 13.0f - 0.5f;
            emb[static_cast<size_t>(i * kDim + j)] = f16_from_float(base + 0.2f * noise);
        }
        cls[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101) / 101.0f;
    }
}

} // namespace

int main()
{
    using namespace todre_cpp;
    try {
        std::vector<uint16_t> emb(static_cast<size_t>(kTokens * kDim));
        std::vector<float> cls(static_cast<size_t>(kTokens));
        make_tokens(emb, cls);

        // Host memory, so a CPU context (a CUDA context takes device memory:
        // see todre_context_alloc() and todre_context_copy()).
        Context ctx = make_context("cpu");

        // Max-sum objective, CLS pivot searched in the thumbnail, keep 10%.
        SelectConfig cfg = make_select_config();
        check(todre_select_config_set_double(cfg.get(), TODRE_SELECT_RATIO, 0.10), "ratio");
        check(todre_select_config_set_int(cfg.get(), TODRE_SELECT_PIVOT_LO, 0), "pivot_lo");
        check(todre_select_config_set_int(cfg.get(), TODRE_SELECT_PIVOT_HI, kThumbnail),
              "pivot_hi");
        int64_t k = 0;
        check(todre_select_keep_count(cfg.get(), kTokens, &k), "todre_select_keep_count");

        std::vector<int64_t> kept(static_cast<size_t>(k));
        const HostView v_emb(emb.data(), kF16, {kTokens, kDim});
        const HostView v_cls(cls.data(), kF32, {kTokens});
        const HostView v_out(kept.data(), kI64, {k});
        check(todre_select(ctx.get(), cfg.get(), v_emb.get(), v_cls.get(), v_out.get()),
              "todre_select");

        std::printf("kept %lld of %lld tokens (ascending positions):\n",
                    static_cast<long long>(k), static_cast<long long>(kTokens));
        for (size_t i = 0; i < kept.size(); i++)
            std::printf("%lld%c", static_cast<long long>(kept[i]),
                        (i % 16 == 15 || i + 1 == kept.size()) ? '\n' : ' ');
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
