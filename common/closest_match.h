// Spelling suggestions for names a user typed (commands, flags, models): the candidate nearest
// to a word, when it is near enough to be a typo of it.
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepool {

// Edits (insert, delete or replace a character, or swap two neighbours) that turn a into b.
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate with the fewest edits from `word`, if that is at most 1 for words of up to 3
// characters, 2 up to 6 and 3 beyond; the first such candidate on a tie; nullopt otherwise.
std::optional<std::string> ClosestMatch(std::string_view word,
                                        const std::vector<std::string>& candidates);

}  // namespace deepool
