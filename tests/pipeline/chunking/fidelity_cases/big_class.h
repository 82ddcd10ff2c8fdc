#pragma once
#include <vector>

/// A class with many members.
class Registry {
 public:
  // accessor 0
  int get_0() const { return values_[0] + offset_; }
  // accessor 1
  int get_1() const { return values_[1] + offset_; }
  // accessor 2
  int get_2() const { return values_[2] + offset_; }
  // accessor 3
  int get_3() const { return values_[3] + offset_; }
  // accessor 4
  int get_4() const { return values_[4] + offset_; }
  // accessor 5
  int get_5() const { return values_[5] + offset_; }
  // accessor 6
  int get_6() const { return values_[6] + offset_; }
  // accessor 7
  int get_7() const { return values_[7] + offset_; }
  // accessor 8
  int get_8() const { return values_[8] + offset_; }
  // accessor 9
  int get_9() const { return values_[9] + offset_; }
  // accessor 10
  int get_10() const { return values_[10] + offset_; }
  // accessor 11
  int get_11() const { return values_[11] + offset_; }
  // accessor 12
  int get_12() const { return values_[12] + offset_; }
  // accessor 13
  int get_13() const { return values_[13] + offset_; }
  // accessor 14
  int get_14() const { return values_[14] + offset_; }
  // accessor 15
  int get_15() const { return values_[15] + offset_; }
  // accessor 16
  int get_16() const { return values_[16] + offset_; }
  // accessor 17
  int get_17() const { return values_[17] + offset_; }
  // accessor 18
  int get_18() const { return values_[18] + offset_; }
  // accessor 19
  int get_19() const { return values_[19] + offset_; }
  // accessor 20
  int get_20() const { return values_[20] + offset_; }
  // accessor 21
  int get_21() const { return values_[21] + offset_; }
  // accessor 22
  int get_22() const { return values_[22] + offset_; }
  // accessor 23
  int get_23() const { return values_[23] + offset_; }
  // accessor 24
  int get_24() const { return values_[24] + offset_; }
  // accessor 25
  int get_25() const { return values_[25] + offset_; }
  // accessor 26
  int get_26() const { return values_[26] + offset_; }
  // accessor 27
  int get_27() const { return values_[27] + offset_; }
  // accessor 28
  int get_28() const { return values_[28] + offset_; }
  // accessor 29
  int get_29() const { return values_[29] + offset_; }
 private:
  std::vector<int> values_;
  int offset_ = 0;
};
