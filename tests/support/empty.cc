// An empty source: pmhash_test_pch (CMakeLists.txt) compiles it to build the precompiled
// header that every test binary reuses.
