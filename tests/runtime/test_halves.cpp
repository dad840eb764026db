// The cuda backend's bf16 handles (runtime/cuda/halves.hpp, plain C++): the executor addresses a
// bf16 buffer of n elements in floats, and float k of its handle must land on byte 2k of the real
// buffer, for inner pointers, the end pointer and handles given back and handed out again.
#include <catch2/catch.hpp>

#include <cstdint>

#include "halves.hpp"

TEST_CASE("bf16 handles: float k of a handle is element k of its buffer", "[runtime][bf16]") {
    strata::runtime::Halves h;
    alignas(16) static char real_a[2 * 1000], real_b[2 * 24];
    char* a = h.add(real_a, 4 * 1000);  // 1000 elements: 4000 bytes of handle, 2000 real
    char* b = h.add(real_b, 4 * 24);
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    CHECK(b >= a + 4000);  // handles do not overlap
    const auto* fa = reinterpret_cast<const float*>(a);
    CHECK(h.resolve(fa).p == real_a);
    CHECK(h.resolve(fa).fmt == 1);
    CHECK(h.resolve(fa + 300).p == real_a + 600);  // element 300: byte 600
    CHECK(h.resolve(fa + 999).p == real_a + 1998);
    CHECK(h.resolve(reinterpret_cast<const float*>(b) + 5).p == real_b + 10);
    // An address outside the reservation is fp32 storage, as it is.
    float plain[4];
    CHECK(h.resolve(plain + 2).p == plain + 2);
    CHECK(h.resolve(plain).fmt == 0);
    CHECK(h.resolve(nullptr).p == nullptr);
    // Given back, an address in it is refused; the next buffer of that size reuses the handle.
    CHECK(h.remove(b) == real_b);
    CHECK_THROWS_WITH(h.resolve(reinterpret_cast<const float*>(b) + 30), Catch::Contains("no live bf16 buffer"));
    CHECK_THROWS(h.remove(b));
    static char real_c[2 * 24];
    CHECK(h.add(real_c, 4 * 24) == b);
    CHECK(h.resolve(reinterpret_cast<const float*>(b) + 23).p == real_c + 46);
    CHECK(h.remove(reinterpret_cast<char*>(plain)) == nullptr);  // not a handle
}
