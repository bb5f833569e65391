/* Fills two gaps of mlx-c on non-ARM hosts (force-included into every mlx-c unit and into bindgen).
 *
 * 1. mlx-c's half.h defines float16_t / bfloat16_t only on ARM, so the f16/bf16 accessors mlx-rs
 *    needs would be compiled out. Off ARM we define them here (and pre-empt half.h's include guard):
 *    in C++ as MLX's own half types, in C (bindgen) as 16-bit storage structs of the same size.
 * 2. GCC 12's libstdc++ has no std::format, which mlx-c's private/io.h uses for error messages;
 *    a minimal "{}"-substituting stand-in is provided when the library lacks it. */
#ifndef GEMMA_DESK_MLX_HALF_SHIM_H
#define GEMMA_DESK_MLX_HALF_SHIM_H

#if !defined(__aarch64__) && !defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC)
#define MLX_HALF_H
#define HAS_FLOAT16
#define HAS_BFLOAT16
#ifdef __cplusplus
#include <mlx/types/half_types.h>
typedef mlx::core::float16_t float16_t;
typedef mlx::core::bfloat16_t bfloat16_t;
#else
#include <stdint.h>
typedef struct { uint16_t bits; } float16_t;
typedef uint16_t bfloat16_t;
#endif
#endif

#if defined(__cplusplus)
#include <version>
#if !defined(__cpp_lib_format)
#include <sstream>
#include <string>
#include <string_view>
namespace std {
namespace gemma_desk_format_detail {
inline void put(std::ostringstream& out, std::string_view& fmt) { out << fmt; fmt = {}; }
template <typename T, typename... Rest>
void put(std::ostringstream& out, std::string_view& fmt, const T& value, const Rest&... rest) {
  auto at = fmt.find("{}");
  if (at == std::string_view::npos) { out << fmt; fmt = {}; return; }
  out << fmt.substr(0, at) << value;
  fmt.remove_prefix(at + 2);
  put(out, fmt, rest...);
}
}  // namespace gemma_desk_format_detail
template <typename... Args>
std::string format(std::string_view fmt, const Args&... args) {
  std::ostringstream out;
  gemma_desk_format_detail::put(out, fmt, args...);
  return out.str();
}
}  // namespace std
#endif
#endif

#endif
