// etc_runner: runs any etc `.pte` (portable or with `cpu` delegates) on ExecuTorch's C++ runtime
// (extension::Module), with etc's cpu backend linked in.
//
//   etc_runner model.pte [--method forward] [--input x.npy ...] [--seed N] [--expect y.npy ...]
//              [--atol 1e-4] [--rtol 1e-4] [--output-dir DIR] [--runs N] [--etdump run.etdp]
//
// Inputs come from .npy files (their shapes may be any a dynamic dim allows) or are random (floats
// uniform in [-1, 1), integers 0, booleans false: seeded). Each output is printed (shape, dtype,
// first values), saved as DIR/output_<i>.npy, and compared with --expect files (|out - ref| <=
// atol + rtol |ref| elementwise; exit status 1 and the worst element when not). --runs N times N
// calls and prints their median; --etdump writes ExecuTorch's ETDump of the runs (the cpu
// delegate's profile regions in it when compiled with CpuPartitioner(profile=True)).
#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int etc_cpu_backend_registration();

namespace {

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

struct Array {
  ScalarType dtype = ScalarType::Float;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct DtypeName {
  ScalarType dtype;
  const char* descr;  // numpy's, little endian
  size_t size;
};
const DtypeName kDtypes[] = {{ScalarType::Float, "<f4", 4}, {ScalarType::Double, "<f8", 8}, {ScalarType::Half, "<f2", 2},
                             {ScalarType::Long, "<i8", 8},  {ScalarType::Int, "<i4", 4},    {ScalarType::Short, "<i2", 2},
                             {ScalarType::Char, "|i1", 1},  {ScalarType::Byte, "|u1", 1},   {ScalarType::Bool, "|b1", 1}};

const DtypeName* by_dtype(ScalarType t) {
  for (const auto& d : kDtypes) {
    if (d.dtype == t) return &d;
  }
  return nullptr;
}

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "etc_runner: %s\n", message.c_str());
  std::exit(2);
}

Array read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("cannot read " + path);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) die(path + " is not a .npy file");
  size_t header_size, at;
  if (data[6] == 1) {
    header_size = uint8_t(data[8]) | (uint8_t(data[9]) << 8);
    at = 10;
  } else {
    if (data.size() < 12) die(path + " is truncated");
    header_size = uint8_t(data[8]) | (uint8_t(data[9]) << 8) | (uint8_t(data[10]) << 16) | (size_t(uint8_t(data[11])) << 24);
    at = 12;
  }
  if (at + header_size > data.size()) die(path + " is truncated");
  std::string header = data.substr(at, header_size);
  Array a;
  const DtypeName* dtype = nullptr;
  for (const auto& d : kDtypes) {
    if (header.find(std::string("'descr': '") + d.descr + "'") != std::string::npos) dtype = &d;
  }
  if (!dtype) die(path + ": an element type this runner does not read (" + header + ")");
  if (header.find("'fortran_order': False") == std::string::npos) die(path + " is not in C order");
  a.dtype = dtype->dtype;
  size_t open = header.find("'shape': ("), close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos) die(path + ": no shape");
  std::stringstream dims(header.substr(open + 10, close - open - 10));
  std::string item;
  size_t count = 1;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    a.shape.push_back(std::stoll(item));
    count *= size_t(a.shape.back());
  }
  size_t bytes = count * dtype->size;
  if (data.size() - at - header_size != bytes) die(path + ": its data is not its shape's size");
  a.bytes.assign(data.begin() + long(at + header_size), data.end());
  return a;
}

void write_npy(const std::string& path, const Array& a) {
  const DtypeName* dtype = by_dtype(a.dtype);
  if (!dtype) die("cannot write an output of this dtype as .npy");
  std::string shape;  // numpy's tuple: "()", "(5,)", "(2, 3)"
  for (size_t d = 0; d < a.shape.size(); ++d) shape += (d ? ", " : "") + std::to_string(a.shape[d]);
  if (a.shape.size() == 1) shape += ",";
  std::string header = std::string("{'descr': '") + dtype->descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t n = uint16_t(header.size());
  f.put(char(n & 0xFF));
  f.put(char(n >> 8));
  f << header;
  f.write(reinterpret_cast<const char*>(a.bytes.data()), long(a.bytes.size()));
}

double element(const Array& a, size_t i) {
  const uint8_t* p = a.bytes.data();
  switch (a.dtype) {
    case ScalarType::Float: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case ScalarType::Double: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case ScalarType::Long: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return double(v); }
    case ScalarType::Int: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case ScalarType::Short: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case ScalarType::Char: return double(int8_t(p[i]));
    case ScalarType::Byte: case ScalarType::Bool: return p[i];
    case ScalarType::Half: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      int e = (h >> 10) & 0x1F, m = h & 0x3FF;
      double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(m + 1024, e - 25);
      return h & 0x8000 ? -v : v;
    }
    default: return NAN;
  }
}

Array to_array(const executorch::aten::Tensor& t) {
  Array a;
  a.dtype = t.scalar_type();
  for (int d = 0; d < t.dim(); ++d) a.shape.push_back(t.size(d));
  const auto* p = static_cast<const uint8_t*>(t.const_data_ptr());
  a.bytes.assign(p, p + t.nbytes());
  return a;
}

size_t numel(const Array& a) {
  size_t n = 1;
  for (int64_t d : a.shape) n *= size_t(d);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, method = "forward", output_dir, etdump_path;
  std::vector<std::string> inputs, expects;
  double atol = 1e-4, rtol = 1e-4;
  int runs = 1;
  unsigned seed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--method") method = value();
    else if (arg == "--input") inputs.push_back(value());
    else if (arg == "--expect") expects.push_back(value());
    else if (arg == "--atol") atol = std::stod(value());
    else if (arg == "--rtol") rtol = std::stod(value());
    else if (arg == "--output-dir") output_dir = value();
    else if (arg == "--runs") runs = std::max(1, std::stoi(value()));
    else if (arg == "--seed") seed = unsigned(std::stoul(value()));
    else if (arg == "--etdump") etdump_path = value();
    else if (arg == "-h" || arg == "--help") {
      std::printf("usage: etc_runner model.pte [--method NAME] [--input x.npy ...] [--seed N] [--expect y.npy ...]\n"
                  "                  [--atol A] [--rtol R] [--output-dir DIR] [--runs N] [--etdump FILE]\n");
      return 0;
    } else if (!arg.empty() && arg[0] == '-') die("unknown option " + arg);
    else if (model.empty()) model = arg;
    else die("one model at a time (got " + model + " and " + arg + ")");
  }
  if (model.empty()) die("no model given (etc_runner model.pte; --help for the options)");
  if (etc_cpu_backend_registration() != 0) die("etc's cpu backend did not register (another 'cpu' backend first?)");

  std::unique_ptr<executorch::etdump::ETDumpGen> tracer;
  if (!etdump_path.empty()) tracer = std::make_unique<executorch::etdump::ETDumpGen>();
  executorch::etdump::ETDumpGen* etdump = tracer.get();
  Module module(model, Module::LoadMode::Mmap, std::move(tracer));
  Error error = module.load_method(method);
  if (error != Error::Ok) die("cannot load method '" + method + "' of " + model + " (ExecuTorch error " +
                              std::to_string(int(error)) + "; the log above says why)");
  auto meta = module.method_meta(method);
  if (!meta.ok()) die("no method meta for '" + method + "'");
  size_t n_inputs = meta->num_inputs();
  if (!inputs.empty() && inputs.size() != n_inputs) {
    die("method '" + method + "' takes " + std::to_string(n_inputs) + " inputs, got " + std::to_string(inputs.size()));
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<Array> arrays;
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<EValue> values;
  for (size_t i = 0; i < n_inputs; ++i) {
    auto info = meta->input_tensor_meta(i);
    if (!info.ok()) die("input " + std::to_string(i) + " is not a tensor (this runner passes tensors only)");
    Array a;
    if (!inputs.empty()) {
      a = read_npy(inputs[i]);
      if (a.dtype != info->scalar_type()) die(inputs[i] + ": its dtype is not input " + std::to_string(i) + "'s");
    } else {
      a.dtype = info->scalar_type();
      for (auto d : info->sizes()) a.shape.push_back(d);
      const DtypeName* dtype = by_dtype(a.dtype);
      if (!dtype) die("input " + std::to_string(i) + " has a dtype this runner cannot make");
      a.bytes.assign(numel(a) * dtype->size, 0);
      if (a.dtype == ScalarType::Float) {
        for (size_t k = 0; k < numel(a); ++k) {
          float v = uniform(rng);
          std::memcpy(a.bytes.data() + 4 * k, &v, 4);
        }
      }
    }
    arrays.push_back(std::move(a));
  }
  for (Array& a : arrays) {
    std::vector<executorch::aten::SizesType> sizes(a.shape.begin(), a.shape.end());
    tensors.push_back(executorch::extension::from_blob(a.bytes.data(), sizes, a.dtype));
    values.emplace_back(*tensors.back());
  }
  std::vector<double> times;
  std::vector<EValue> outputs;
  for (int r = 0; r < runs; ++r) {
    auto start = std::chrono::steady_clock::now();
    auto result = module.execute(method, values);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (!result.ok()) die("executing '" + method + "' failed (ExecuTorch error " + std::to_string(int(result.error())) +
                          "; the log above says why)");
    outputs = *result;
  }
  if (runs > 1) {
    std::sort(times.begin(), times.end());
    std::printf("median %.4f ms over %d runs\n", times[times.size() / 2], runs);
  }
  if (!expects.empty() && expects.size() != outputs.size()) {
    die("the method returns " + std::to_string(outputs.size()) + " outputs, got " + std::to_string(expects.size()) +
        " --expect files");
  }
  int mismatches = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].isTensor()) {
      std::printf("output %zu: not a tensor\n", i);
      continue;
    }
    Array out = to_array(outputs[i].toTensor());
    const DtypeName* dtype = by_dtype(out.dtype);
    std::string shape;
    for (int64_t d : out.shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    std::printf("output %zu: %s %s:", i, dtype ? dtype->descr : "?", shape.empty() ? "scalar" : shape.c_str());
    for (size_t k = 0; k < std::min<size_t>(numel(out), 6); ++k) std::printf(" %.6g", element(out, k));
    std::printf("%s\n", numel(out) > 6 ? " ..." : "");
    if (!output_dir.empty()) write_npy(output_dir + "/output_" + std::to_string(i) + ".npy", out);
    if (expects.empty()) continue;
    Array ref = read_npy(expects[i]);
    if (ref.shape != out.shape) {
      std::printf("  MISMATCH: shape differs from %s\n", expects[i].c_str());
      ++mismatches;
      continue;
    }
    double worst = 0;
    size_t at = 0;
    bool bad = false;
    for (size_t k = 0; k < numel(out); ++k) {
      double o = element(out, k), e = element(ref, k);
      double excess = std::fabs(o - e) - (atol + rtol * std::fabs(e));
      if (!(excess <= 0) && !(std::isnan(o) && std::isnan(e))) {
        if (!bad || excess > worst || std::isnan(excess)) worst = excess, at = k;
        bad = true;
      }
    }
    if (bad) {
      std::printf("  MISMATCH: element %zu is %.8g, expected %.8g (atol %g, rtol %g)\n", at, element(out, at),
                  element(ref, at), atol, rtol);
      ++mismatches;
    } else {
      std::printf("  matches %s\n", expects[i].c_str());
    }
  }
  if (etdump) {
    auto result = etdump->get_etdump_data();
    if (!result.buf) die("no ETDump data");
    std::ofstream f(etdump_path, std::ios::binary);
    f.write(static_cast<const char*>(result.buf), long(result.size));
    std::free(result.buf);
  }
  return mismatches ? 1 : 0;
}
