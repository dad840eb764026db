// The cuda backend's handles a bf16 buffer is addressed by (device_cuda.cu). Plain C++ (no CUDA),
// so that tests/runtime/test_halves.cpp checks it in CI.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <iterator>
#include <map>
#include <stdexcept>
#include <vector>

namespace strata::runtime {

// bf16 buffers. The executor addresses every buffer in floats (the cpu backend holds 2-byte values
// as rounded floats), so a bf16 buffer of n elements is handed out as a handle: n floats of
// address space reserved (never mapped, so never touched) for it, whose float k stands for element
// k of the real 2n bytes on the GPU. resolve() turns an address inside a handle into the real one;
// an address outside the reservation is fp32 storage as it is.
class Halves {
public:
    Halves() = default;
    Halves(const Halves&) = delete;
    Halves& operator=(const Halves&) = delete;
    ~Halves() {
        if (base_) munmap(base_, size_);
    }
    /// A handle of `span` bytes for the real buffer, or null when the reservation is spent.
    char* add(char* real, std::size_t span) {
        if (!base_) reserve();
        char* h = nullptr;
        if (auto& spare = free_[span]; !spare.empty()) {
            h = spare.back();
            spare.pop_back();
        } else if (used_ + span <= size_) {
            h = base_ + used_;
            used_ += span;
        } else {
            return nullptr;
        }
        map_[h] = Entry{real, span};
        return h;
    }
    /// The real buffer of a handle, which is given up; null for an address that is no handle.
    char* remove(char* h) {
        if (!inside(h)) return nullptr;
        auto it = map_.find(h);
        if (it == map_.end()) throw std::runtime_error("cuda: a bf16 buffer released twice, or from its middle");
        char* real = it->second.real;
        free_[it->second.span].push_back(h);
        map_.erase(it);
        return real;
    }
    struct Real {
        void* p;
        bool bf16;
    };
    Real resolve(const void* p) const {
        char* c = static_cast<char*>(const_cast<void*>(p));
        if (!inside(c)) return Real{c, false};
        auto it = map_.upper_bound(c);
        if (it == map_.begin() || c > std::prev(it)->first + std::prev(it)->second.span)
            throw std::runtime_error("cuda: an address in no live bf16 buffer");
        --it;
        return Real{it->second.real + (c - it->first) / 2, true};  // float k of the handle: bf16 k
    }

private:
    struct Entry {
        char* real;
        std::size_t span;
    };
    void reserve() {
        for (std::size_t size : {std::size_t{1} << 40, std::size_t{1} << 38}) {
            void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) continue;
            base_ = static_cast<char*>(p);
            size_ = size;
            return;
        }
        throw std::runtime_error("cuda: no address space could be reserved for bf16 buffers (mmap)");
    }
    bool inside(const char* c) const { return base_ && c >= base_ && c < base_ + size_; }
    char* base_ = nullptr;
    std::size_t size_ = 0, used_ = 0;
    std::map<char*, Entry> map_;
    std::map<std::size_t, std::vector<char*>> free_;
};

}  // namespace strata::runtime
