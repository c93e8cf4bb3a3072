"""The host a lane builds on: the recipes (what a lane needs and passes to CMake), the
CMake options a recipe passes (`cmake_options`), the shard worker repository (`worker`)."""
