"""Backend lanes: recipes, host probes, the lane plan, CMake + Ninja builds, presets, CI."""
