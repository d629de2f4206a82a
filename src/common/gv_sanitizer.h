/*
 * GV_ASAN: 1 when this translation unit is built with AddressSanitizer
 * (gcc defines __SANITIZE_ADDRESS__, clang answers __has_feature), else 0.
 * One place for the test, so code that must behave differently under ASan
 * (uninstrumented paths, manual poisoning, ASan-only tests) agrees on it.
 */
#ifndef GV_SANITIZER_H
#define GV_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define GV_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GV_ASAN 1
#endif
#endif
#ifndef GV_ASAN
#define GV_ASAN 0
#endif

#endif
