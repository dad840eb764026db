// The models use queued signals and timers, so their tests need an event loop but never a
// display: a QCoreApplication lives for the test run. A Catch2 listener makes it, so the tests share
// the project's precompiled Catch2 main (tests/catch_main.cpp) instead of compiling their own.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <QCoreApplication>

#include <memory>

namespace {

struct QtCoreApp : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    void testRunStarting(Catch::TestRunInfo const&) override { app = std::make_unique<QCoreApplication>(argc, argv); }
    void testRunEnded(Catch::TestRunStats const&) override { app.reset(); }
    int argc = 1;
    char name[16] = "gui_test_models";
    char* argv[2] = {name, nullptr};
    std::unique_ptr<QCoreApplication> app;
};

}  // namespace

CATCH_REGISTER_LISTENER(QtCoreApp)
