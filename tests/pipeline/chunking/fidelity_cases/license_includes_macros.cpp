// Copyright (c) 2024 The Fidelity Authors. All rights reserved.
// Use of this source code is governed by a BSD-style license.

#include <cstdio>
#include <vector>
#include "local/header.h"

#define SQUARE(x) ((x) * (x))
#define LOG(msg) \
  std::printf("%s\n", msg)

/* A comment between units: it must not vanish. */
static int counter = 0;
using Size = unsigned long;

int square_all(std::vector<int>& v) {
  for (auto& x : v) x = SQUARE(x);
  return static_cast<int>(v.size());
}

// another comment between units

extern int external_value;
typedef struct { int a; int b; } Pair;

int add(int a, int b) { return a + b; }
// trailing comment at the end of the file
