# -*- Python -*-
# The gtest unit tests, each test case one lit test.

import os

import lit.formats

config.name = "SHARDX-Unit"
config.suffixes = []
config.test_exec_root = os.path.join(config.shardx_obj_root, "unittests")
config.test_source_root = config.test_exec_root
config.test_format = lit.formats.GoogleTest(".", "Tests")
