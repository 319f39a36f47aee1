// The implementation of the parsing helpers of include/pmhash/options.h.
#include "pmhash/options.h"

namespace pmhash {

bool ParsePersistMode(const std::string& text, PersistMode* mode) {
  if (text == "adr") *mode = PersistMode::kAdr;
  else if (text == "eadr") *mode = PersistMode::kEadr;
  else if (text == "none") *mode = PersistMode::kNone;
  else return false;
  return true;
}

bool ParseFlushInstruction(const std::string& text, FlushInstruction* flush) {
  if (text == "auto") *flush = FlushInstruction::kAuto;
  else if (text == "clwb") *flush = FlushInstruction::kClwb;
  else if (text == "clflushopt") *flush = FlushInstruction::kClflushopt;
  else if (text == "clflush") *flush = FlushInstruction::kClflush;
  else return false;
  return true;
}

const char* PersistModeName(PersistMode mode) {
  switch (mode) {
    case PersistMode::kAdr: return "adr";
    case PersistMode::kEadr: return "eadr";
    case PersistMode::kNone: return "none";
  }
  return "?";
}

const char* FlushInstructionName(FlushInstruction flush) {
  switch (flush) {
    case FlushInstruction::kAuto: return "auto";
    case FlushInstruction::kClwb: return "clwb";
    case FlushInstruction::kClflushopt: return "clflushopt";
    case FlushInstruction::kClflush: return "clflush";
  }
  return "?";
}

}  // namespace pmhash
