//===- AmpReport.cpp - explaining AMP decisions: JSON and DOT -------------===//

#include "ampjit/Dialect/Amp/IR/AmpOps.h"
#include "ampjit/Dialect/Amp/Transforms/AmpRewrites.h"
#include "ampjit/Dialect/Jit/IR/JitDialect.h"
#include "ampjit/Dialect/Jit/IR/StateModel.h"
#include "ampjit/runtime/Fnv1a.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;

namespace ampjit::ir::amp {

StringRef stringifyDecisionReason(DecisionReason reason) {
  switch (reason) {
  case DecisionReason::Unchanged: return "unchanged";
  case DecisionReason::List: return "list";
  case DecisionReason::Condition: return "condition";
  case DecisionReason::Level: return "level";
  case DecisionReason::Inferred: return "inferred";
  case DecisionReason::Promoted: return "promoted";
  case DecisionReason::Backward: return "backward";
  case DecisionReason::Region: return "region";
  case DecisionReason::AlwaysFp32: return "always_fp32";
  case DecisionReason::Unsupported: return "unsupported";
  case DecisionReason::Reference: return "reference";
  }
  llvm_unreachable("unknown decision reason");
}

void AmpReport::recordMasterWeightCopies(ModuleOp module) {
  masterWeightCopies.clear();
  for (auto function : module.getOps<func::FuncOp>()) {
    if (function.isDeclaration())
      continue;
    for (BlockArgument copy : function.getArguments()) {
      auto master = function.getArgAttrOfType<IntegerAttr>(copy.getArgNumber(),
                                                           ir::JitDialect::kDerivedFromAttrName);
      if (!master || master.getInt() < 0 || master.getInt() >= int64_t(function.getNumArguments()))
        continue;
      MasterWeightCopy entry;
      entry.function = function.getSymName().str();
      entry.master = unsigned(master.getInt());
      entry.copy = copy.getArgNumber();
      entry.masterName = ir::argumentName(function.getArgument(entry.master));
      entry.copyName = ir::argumentName(copy);
      llvm::raw_string_ostream(entry.copyType) << copy.getType();
      masterWeightCopies.push_back(std::move(entry));
    }
  }
}

void AmpReport::writeJson(llvm::raw_ostream &os) const {
  std::map<std::string, int64_t> opsPerType;
  for (const OpDecision &decision : decisions)
    ++opsPerType[decision.computeType];
  llvm::json::Object perType;
  for (const auto &[type, count] : opsPerType)
    perType[type] = count;

  llvm::json::Array ops;
  for (const OpDecision &decision : decisions) {
    llvm::json::Object entry{
        {"op", decision.opName},
        {"location", decision.location},
        {"compute_type", decision.computeType},
        {"reason", stringifyDecisionReason(decision.reason)},
        {"detail", decision.detail},
    };
    if (!decision.category.empty())
      entry["category"] = decision.category;
    if (!decision.policySource.empty())
      entry["policy_entry"] = decision.policySource;
    if (!decision.source.empty())
      entry["inferred_from"] = decision.source;
    ops.push_back(std::move(entry));
  }

  // What O2 keeps in low precision, named: which parameters the step reads
  // through a copy, and which it keeps in f32 alone (batch norm's, say).
  llvm::json::Array copies;
  for (const MasterWeightCopy &copy : masterWeightCopies)
    copies.push_back(llvm::json::Object{
        {"function", copy.function},
        {"master", llvm::json::Object{{"argument", int64_t(copy.master)}, {"name", copy.masterName}}},
        {"copy", llvm::json::Object{{"argument", int64_t(copy.copy)},
                                    {"name", copy.copyName},
                                    {"type", copy.copyType}}},
    });

  llvm::json::Object root{
      {"options", llvm::json::Object{{"level", level},
                                     {"dtype", dtype},
                                     {"semantics", semantics},
                                     {"target", target},
                                     {"policy", policyName},
                                     {"policy_hash", runtime::hex64(policyHash)}}},
      {"summary", llvm::json::Object{{"ops_per_compute_type", std::move(perType)},
                                     {"casts_inserted", int64_t(castsInserted)},
                                     {"casts_removed", int64_t(castsRemoved)},
                                     {"master_weight_copies", int64_t(masterWeightCopies.size())}}},
      {"ops", std::move(ops)},
      {"master_weights", std::move(copies)},
  };
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

/// Fill colors by compute type: the precision is what the picture is for.
static StringRef colorOf(StringRef computeType) {
  if (computeType == "f16")
    return "#f4a261";
  if (computeType == "bf16")
    return "#c77dff";
  if (computeType == "f32")
    return "#8ecae6";
  if (computeType == "f64")
    return "#219ebc";
  return "#ffffff";
}

static std::string dotEscape(StringRef text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\')
      escaped += '\\';
    escaped += c;
  }
  return escaped;
}

void AmpReport::writeDot(ModuleOp module, llvm::raw_ostream &os) const {
  os << "digraph amp {\n  node [shape=box, style=\"rounded,filled\", fontname=\"monospace\"];\n";
  os << "  label=\"ampjit AMP " << level << " " << dtype << " (" << policyName
     << "): blue f32, orange f16, purple bf16, grey casts\";\n";
  unsigned functionIndex = 0;
  for (auto function : module.getOps<func::FuncOp>()) {
    if (function.isDeclaration())
      continue;
    llvm::DenseMap<Value, std::string> nodeOf;
    std::string prefix = llvm::formatv("f{0}_", functionIndex++).str();
    os << "  subgraph cluster_" << prefix << " {\n    label=\"@"
       << dotEscape(function.getSymName()) << "\";\n";
    for (BlockArgument argument : function.getArguments()) {
      std::string name = llvm::formatv("{0}arg{1}", prefix, argument.getArgNumber()).str();
      nodeOf[argument] = name;
      std::string role;
      if (auto roleAttr = function.getArgAttrOfType<StringAttr>(argument.getArgNumber(), JitDialect::kRoleAttrName))
        role = llvm::formatv(" {0}", roleAttr.getValue()).str();
      std::optional<FloatType> element = floatElementTypeOf(argument.getType());
      std::string typeText;
      if (element) {
        llvm::raw_string_ostream typeOs(typeText);
        element->print(typeOs);
      }
      // A framework's (or jit::trace's) name for the tensor, below the number.
      std::string tensorName;
      if (auto nameLoc = dyn_cast<NameLoc>(argument.getLoc()))
        tensorName = "\\n" + dotEscape(nameLoc.getName().getValue());
      os << "    " << name << " [shape=ellipse, label=\"%arg" << argument.getArgNumber() << role << tensorName
         << "\", fillcolor=\"" << colorOf(typeText) << "\"];\n";
    }
    unsigned opIndex = 0;
    function.walk([&](Operation *op) {
      if (op == function.getOperation())
        return;
      std::string name = llvm::formatv("{0}op{1}", prefix, opIndex++).str();
      for (Value result : op->getResults())
        nodeOf[result] = name;
      std::string typeText = "";
      if (std::optional<FloatType> element = computeElementType(op)) {
        llvm::raw_string_ostream typeOs(typeText);
        element->print(typeOs);
      }
      bool isCast = isa<CastOp>(op);
      os << "    " << name << " [label=\"" << dotEscape(op->getName().getStringRef());
      if (!typeText.empty())
        os << "\\n" << typeText;
      os << "\", fillcolor=\"" << (isCast ? StringRef("#d9d9d9") : colorOf(typeText)) << "\"];\n";
      for (Value operand : op->getOperands())
        if (auto from = nodeOf.find(operand); from != nodeOf.end())
          os << "    " << from->second << " -> " << name << ";\n";
    });
    os << "  }\n";
  }
  os << "}\n";
}

LogicalResult writeReportFiles(const AmpReport &report, ModuleOp module, StringRef path,
                               StringRef dotPath) {
  auto writeTo = [&](StringRef file, auto write) -> LogicalResult {
    std::error_code error;
    llvm::raw_fd_ostream os(file, error, llvm::sys::fs::OF_Text);
    if (error)
      return module.emitError() << "cannot write the AMP report to '" << file
                                << "': " << error.message();
    write(os);
    return success();
  };
  if (!path.empty() && failed(writeTo(path, [&](llvm::raw_ostream &os) { report.writeJson(os); })))
    return failure();
  if (!dotPath.empty() &&
      failed(writeTo(dotPath, [&](llvm::raw_ostream &os) { report.writeDot(module, os); })))
    return failure();
  return success();
}

} // namespace ampjit::ir::amp
