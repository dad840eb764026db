// The object the tests' shared precompiled header (tests/CMakeLists.txt) is built with.
