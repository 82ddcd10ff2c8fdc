#include <string>

namespace big {

// Dispatches on a code; far larger than one doc.
int dispatch(int code, const std::string& name) {
  int total = 0;
  if (code > 0) {
    for (int k = 0; k < 2; ++k) {
      total += k * 0 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 0;
      } else {
        total += 0 * 3;
      }
    }
  } else {
    total -= 0;
  }
  if (code > 1) {
    for (int k = 0; k < 3; ++k) {
      total += k * 1 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 1;
      } else {
        total += 1 * 3;
      }
    }
  } else {
    total -= 1;
  }
  if (code > 2) {
    for (int k = 0; k < 4; ++k) {
      total += k * 2 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 2;
      } else {
        total += 2 * 3;
      }
    }
  } else {
    total -= 2;
  }
  if (code > 3) {
    for (int k = 0; k < 5; ++k) {
      total += k * 3 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 3;
      } else {
        total += 3 * 3;
      }
    }
  } else {
    total -= 3;
  }
  if (code > 4) {
    for (int k = 0; k < 6; ++k) {
      total += k * 4 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 4;
      } else {
        total += 4 * 3;
      }
    }
  } else {
    total -= 4;
  }
  if (code > 5) {
    for (int k = 0; k < 7; ++k) {
      total += k * 5 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 5;
      } else {
        total += 5 * 3;
      }
    }
  } else {
    total -= 5;
  }
  if (code > 6) {
    for (int k = 0; k < 8; ++k) {
      total += k * 6 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 6;
      } else {
        total += 6 * 3;
      }
    }
  } else {
    total -= 6;
  }
  if (code > 7) {
    for (int k = 0; k < 9; ++k) {
      total += k * 7 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 7;
      } else {
        total += 7 * 3;
      }
    }
  } else {
    total -= 7;
  }
  if (code > 8) {
    for (int k = 0; k < 10; ++k) {
      total += k * 8 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 8;
      } else {
        total += 8 * 3;
      }
    }
  } else {
    total -= 8;
  }
  if (code > 9) {
    for (int k = 0; k < 11; ++k) {
      total += k * 9 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 9;
      } else {
        total += 9 * 3;
      }
    }
  } else {
    total -= 9;
  }
  if (code > 10) {
    for (int k = 0; k < 12; ++k) {
      total += k * 10 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 10;
      } else {
        total += 10 * 3;
      }
    }
  } else {
    total -= 10;
  }
  if (code > 11) {
    for (int k = 0; k < 13; ++k) {
      total += k * 11 + static_cast<int>(name.size());
      if (total % 7 == 0) {
        total -= 11;
      } else {
        total += 11 * 3;
      }
    }
  } else {
    total -= 11;
  }
  switch (code) {
    case 0: {
      total += 0 * code;
      if (total > 0) total = 0;
      break;
    }
    case 1: {
      total += 1 * code;
      if (total > 100) total = 1;
      break;
    }
    case 2: {
      total += 2 * code;
      if (total > 200) total = 2;
      break;
    }
    case 3: {
      total += 3 * code;
      if (total > 300) total = 3;
      break;
    }
    case 4: {
      total += 4 * code;
      if (total > 400) total = 4;
      break;
    }
    case 5: {
      total += 5 * code;
      if (total > 500) total = 5;
      break;
    }
    case 6: {
      total += 6 * code;
      if (total > 600) total = 6;
      break;
    }
    case 7: {
      total += 7 * code;
      if (total > 700) total = 7;
      break;
    }
    case 8: {
      total += 8 * code;
      if (total > 800) total = 8;
      break;
    }
    case 9: {
      total += 9 * code;
      if (total > 900) total = 9;
      break;
    }
    case 10: {
      total += 10 * code;
      if (total > 1000) total = 10;
      break;
    }
    case 11: {
      total += 11 * code;
      if (total > 1100) total = 11;
      break;
    }
    case 12: {
      total += 12 * code;
      if (total > 1200) total = 12;
      break;
    }
    case 13: {
      total += 13 * code;
      if (total > 1300) total = 13;
      break;
    }
    case 14: {
      total += 14 * code;
      if (total > 1400) total = 14;
      break;
    }
    case 15: {
      total += 15 * code;
      if (total > 1500) total = 15;
      break;
    }
    default:
      total = -1;
      break;
  }
  return total;
}

}  // namespace big
