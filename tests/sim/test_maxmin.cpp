// Max-min solver against hand-derived shares (SimGrid maxmin_test style: each expectation is
// derived in the comment above it). Units: capacity 1 busy-second per second; rate = fraction/s.
#include <catch2/catch.hpp>

#include "strata/sim/maxmin.hpp"

using namespace strata::sim;

TEST_CASE("maxmin: one resource, two equal flows share it half and half", "[maxmin]") {
    // x1*1 + x2*1 <= 1, symmetric -> x1 = x2 = 1/2.
    auto r = maxmin_rates({1.0}, {MaxMinFlow{{{0, 1.0}}}, MaxMinFlow{{{0, 1.0}}}});
    REQUIRE(r.size() == 2);
    CHECK(r[0] == Approx(0.5));
    CHECK(r[1] == Approx(0.5));
}

TEST_CASE("maxmin: a flow alone runs at 1 / its weight", "[maxmin]") {
    // 2 busy-seconds on one resource: x*2 <= 1 -> x = 1/2 (it takes 2 s).
    auto r = maxmin_rates({1.0}, {MaxMinFlow{{{0, 2.0}}}});
    CHECK(r[0] == Approx(0.5));
}

TEST_CASE("maxmin: weighted demands split the link's time equally", "[maxmin]") {
    // A needs 1 busy-s, B needs 3. Fair on normalised progress: xA = t/1, xB = t/3.
    // Constraint: xA*1 + xB*3 = 2t <= 1 -> t = 1/2: xA = 1/2, xB = 1/6 (each holds half the link).
    auto r = maxmin_rates({1.0}, {MaxMinFlow{{{0, 1.0}}}, MaxMinFlow{{{0, 3.0}}}});
    CHECK(r[0] == Approx(0.5));
    CHECK(r[1] == Approx(1.0 / 6.0));
}

TEST_CASE("maxmin: priority 2 gets twice the share", "[maxmin]") {
    // xA = 2t, xB = t; 2t + t <= 1 -> t = 1/3: xA = 2/3, xB = 1/3.
    MaxMinFlow a{{{0, 1.0}}};
    a.priority = 2;
    auto r = maxmin_rates({1.0}, {a, MaxMinFlow{{{0, 1.0}}}});
    CHECK(r[0] == Approx(2.0 / 3.0));
    CHECK(r[1] == Approx(1.0 / 3.0));
}

TEST_CASE("maxmin: a flow crossing two resources is limited by the tighter one", "[maxmin]") {
    // F1 on r0 and r1; F2 on r0 only; F3, F4 on r1 only (all weights 1).
    // Progressive filling: r1 carries 3 flows and saturates first at t = 1/3 -> F1 = F3 = F4 = 1/3.
    // r0 then has 1 - 1/3 = 2/3 left, all for F2 -> F2 = 2/3.
    std::vector<MaxMinFlow> f = {MaxMinFlow{{{0, 1.0}, {1, 1.0}}}, MaxMinFlow{{{0, 1.0}}}, MaxMinFlow{{{1, 1.0}}},
                                 MaxMinFlow{{{1, 1.0}}}};
    auto r = maxmin_rates({1.0, 1.0}, f);
    CHECK(r[0] == Approx(1.0 / 3.0));
    CHECK(r[1] == Approx(2.0 / 3.0));
    CHECK(r[2] == Approx(1.0 / 3.0));
    CHECK(r[3] == Approx(1.0 / 3.0));
}

TEST_CASE("maxmin: unequal weights of one flow on two resources", "[maxmin]") {
    // F: w(r0) = 1, w(r1) = 0.5 -> phi_F = 1/max w = 1. G: w(r1) = 1 -> phi_G = 1.
    // r0 load: t*1 <= 1 -> t <= 1. r1 load: t*0.5 + t*1 = 1.5 t <= 1 -> t <= 2/3: binds first.
    // F = G = 2/3.
    auto r = maxmin_rates({1.0, 1.0}, {MaxMinFlow{{{0, 1.0}, {1, 0.5}}}, MaxMinFlow{{{1, 1.0}}}});
    CHECK(r[0] == Approx(2.0 / 3.0));
    CHECK(r[1] == Approx(2.0 / 3.0));
}

TEST_CASE("maxmin: a flow's own cap, and the others take what it leaves", "[maxmin]") {
    // A alone with cap 0.25 -> 0.25 although the link would allow 1.
    MaxMinFlow a{{{0, 1.0}}};
    a.cap = 0.25;
    CHECK(maxmin_rates({1.0}, {a})[0] == Approx(0.25));
    // With B on the same link: t rises to 0.25 where A freezes; link has 1 - 0.5 = 0.5 left, B alone
    // goes on to 0.25 + 0.5 = 0.75.
    auto r = maxmin_rates({1.0}, {a, MaxMinFlow{{{0, 1.0}}}});
    CHECK(r[0] == Approx(0.25));
    CHECK(r[1] == Approx(0.75));
}

TEST_CASE("maxmin: a flow that touches nothing gets its cap; capacity scales shares", "[maxmin]") {
    MaxMinFlow free_flow;
    free_flow.cap = 3.0;
    CHECK(maxmin_rates({1.0}, {free_flow})[0] == Approx(3.0));
    // Capacity 2 busy-seconds per second (two links bonded): two flows of weight 1 each get 1.
    auto r = maxmin_rates({2.0}, {MaxMinFlow{{{0, 1.0}}}, MaxMinFlow{{{0, 1.0}}}});
    CHECK(r[0] == Approx(1.0));
    CHECK(r[1] == Approx(1.0));
}
