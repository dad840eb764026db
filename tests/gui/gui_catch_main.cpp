// Catch2's main with a QCoreApplication around it: the models use queued signals and timers, so
// the tests need an event loop, but never a display.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <QCoreApplication>

int main(int argc, char** argv) {
    QCoreApplication app(argc, argv);
    return Catch::Session().run(argc, argv);
}
