// The cuda backend's handles a 2-byte (bf16 or fp16) buffer is addressed by (device_cuda.cu), in a HandleSpace
// (runtime/src/handle_space.hpp). Plain C++ (no CUDA), so that tests/runtime/test_halves.cpp checks it in CI.
#pragma once

#include <cstddef>
#include <iterator>
#include <map>
#include <stdexcept>

#include "handle_space.hpp"

namespace strata::runtime {

// 2-byte buffers. The executor addresses every buffer in floats (the cpu backend holds 2-byte values
// as rounded floats), so a bf16 or fp16 buffer of n elements is handed out as a handle: n floats of
// address space reserved (never mapped, so never touched) for it, whose float k stands for element
// k of the real 2n bytes on the GPU. resolve() turns an address inside a handle into the real one;
// an address outside the reservation is fp32 storage as it is.
class Halves {
public:
    /// A handle of `span` bytes for the real buffer, or null when the reservation is spent.
    /// fmt: 1 bf16, 2 fp16 (kernels.cuh's TV).
    char* add(char* real, std::size_t span, int fmt = 1) {
        char* h = space_.take(span);
        if (h) map_[h] = Entry{real, span, fmt};
        return h;
    }
    /// The real buffer of a handle, which is given up; null for an address that is no handle.
    char* remove(char* h) {
        if (!space_.inside(h)) return nullptr;
        auto it = map_.find(h);
        if (it == map_.end()) throw std::runtime_error("cuda: a bf16 buffer released twice, or from its middle");
        char* real = it->second.real;
        space_.give(h, it->second.span);
        map_.erase(it);
        return real;
    }
    struct Real {
        void* p;
        int fmt;  ///< 0: fp32 (no handle), 1: bf16, 2: fp16
    };
    Real resolve(const void* p) const {
        char* c = static_cast<char*>(const_cast<void*>(p));
        if (!space_.inside(c)) return Real{c, 0};
        auto it = map_.upper_bound(c);
        if (it == map_.begin() || c > std::prev(it)->first + std::prev(it)->second.span)
            throw std::runtime_error("cuda: an address in no live bf16 buffer");
        --it;
        return Real{it->second.real + (c - it->first) / 2, it->second.fmt};  // float k of the handle: half k
    }

private:
    struct Entry {
        char* real;
        std::size_t span;
        int fmt;
    };
    HandleSpace space_{"cuda: bf16 buffers"};
    std::map<char*, Entry> map_;
};

}  // namespace strata::runtime
