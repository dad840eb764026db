// Address space that is reserved but never mapped, handed out in spans: the addresses the
// executor gets for device buffers that host code must not touch (the cuda backend's bf16 handles,
// runtime/cuda/halves.hpp; the emulated device's memory, device_emulated.cpp). A span given back
// is reused by the next request of its size. Plain C++, checked by tests/runtime/test_halves.cpp.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::runtime {

class HandleSpace {
public:
    /// `who` names the user in the error when no range can be reserved.
    explicit HandleSpace(std::string who) : who_(std::move(who)) {}
    HandleSpace(const HandleSpace&) = delete;
    HandleSpace& operator=(const HandleSpace&) = delete;
    ~HandleSpace() {
        if (base_) munmap(base_, size_);
    }
    /// `span` bytes of the range, or null when it is spent. The range is reserved at the first call.
    char* take(std::size_t span) {
        if (!base_) reserve();
        if (auto& spare = free_[span]; !spare.empty()) {
            char* h = spare.back();
            spare.pop_back();
            return h;
        }
        if (used_ + span > size_) return nullptr;
        char* h = base_ + used_;
        used_ += span;
        return h;
    }
    void give(char* h, std::size_t span) { free_[span].push_back(h); }
    bool inside(const void* p) const {
        const char* c = static_cast<const char*>(p);
        return base_ && c >= base_ && c < base_ + size_;
    }

private:
    void reserve() {
        // Smaller ranges where the address space is tight (ThreadSanitizer's layout, ulimit -v).
        for (std::size_t size : {std::size_t{1} << 40, std::size_t{1} << 38, std::size_t{1} << 36, std::size_t{1} << 34}) {
            void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) continue;
            base_ = static_cast<char*>(p);
            size_ = size;
            return;
        }
        throw std::runtime_error(who_ + ": no address space could be reserved (mmap)");
    }
    std::string who_;
    char* base_ = nullptr;
    std::size_t size_ = 0, used_ = 0;
    std::map<std::size_t, std::vector<char*>> free_;
};

}  // namespace strata::runtime
