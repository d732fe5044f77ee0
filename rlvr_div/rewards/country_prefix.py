"""Verifier of the ``countries`` task (:mod:`rlvr_div.tasks.countries`): one country name, on one finished line,
that starts with the prompt's prefix.

The accepted names are the 193 member states of the United Nations under their common English short names
(:data:`MEMBER_STATES`), plus a fixed list of other names in common use for 14 of them (:data:`OTHER_NAMES`, e.g.
"Ivory Coast", "Czech Republic"), each accepted as written, capitalisation included. Observer states (Vatican City,
Palestine) and territories are not accepted: the valid set is closed and enumerable, which is what exact measurement
needs (:mod:`rlvr_div.exact`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlvr_div.rewards import REWARDS
from rlvr_div.rewards.base import Reward

MEMBER_STATES = (
    "Afghanistan", "Albania", "Algeria", "Andorra", "Angola", "Antigua and Barbuda", "Argentina", "Armenia",
    "Australia", "Austria", "Azerbaijan", "Bahamas", "Bahrain", "Bangladesh", "Barbados", "Belarus", "Belgium",
    "Belize", "Benin", "Bhutan", "Bolivia", "Bosnia and Herzegovina", "Botswana", "Brazil", "Brunei", "Bulgaria",
    "Burkina Faso", "Burundi", "Cabo Verde", "Cambodia", "Cameroon", "Canada", "Central African Republic", "Chad",
    "Chile", "China", "Colombia", "Comoros", "Congo", "Costa Rica", "Côte d'Ivoire", "Croatia", "Cuba", "Cyprus",
    "Czechia", "Democratic Republic of the Congo", "Denmark", "Djibouti", "Dominica", "Dominican Republic", "Ecuador",
    "Egypt", "El Salvador", "Equatorial Guinea", "Eritrea", "Estonia", "Eswatini", "Ethiopia", "Fiji", "Finland",
    "France", "Gabon", "Gambia", "Georgia", "Germany", "Ghana", "Greece", "Grenada", "Guatemala", "Guinea",
    "Guinea-Bissau", "Guyana", "Haiti", "Honduras", "Hungary", "Iceland", "India", "Indonesia", "Iran", "Iraq",
    "Ireland", "Israel", "Italy", "Jamaica", "Japan", "Jordan", "Kazakhstan", "Kenya", "Kiribati", "Kuwait",
    "Kyrgyzstan", "Laos", "Latvia", "Lebanon", "Lesotho", "Liberia", "Libya", "Liechtenstein", "Lithuania",
    "Luxembourg", "Madagascar", "Malawi", "Malaysia", "Maldives", "Mali", "Malta", "Marshall Islands", "Mauritania",
    "Mauritius", "Mexico", "Micronesia", "Moldova", "Monaco", "Mongolia", "Montenegro", "Morocco", "Mozambique",
    "Myanmar", "Namibia", "Nauru", "Nepal", "Netherlands", "New Zealand", "Nicaragua", "Niger", "Nigeria",
    "North Korea", "North Macedonia", "Norway", "Oman", "Pakistan", "Palau", "Panama", "Papua New Guinea",
    "Paraguay", "Peru", "Philippines", "Poland", "Portugal", "Qatar", "Romania", "Russia", "Rwanda",
    "Saint Kitts and Nevis", "Saint Lucia", "Saint Vincent and the Grenadines", "Samoa", "San Marino",
    "Sao Tome and Principe", "Saudi Arabia", "Senegal", "Serbia", "Seychelles", "Sierra Leone", "Singapore",
    "Slovakia", "Slovenia", "Solomon Islands", "Somalia", "South Africa", "South Korea", "South Sudan", "Spain",
    "Sri Lanka", "Sudan", "Suriname", "Sweden", "Switzerland", "Syria", "Tajikistan", "Tanzania", "Thailand",
    "Timor-Leste", "Togo", "Tonga", "Trinidad and Tobago", "Tunisia", "Turkey", "Turkmenistan", "Tuvalu", "Uganda",
    "Ukraine", "United Arab Emirates", "United Kingdom", "United States", "Uruguay", "Uzbekistan", "Vanuatu",
    "Venezuela", "Vietnam", "Yemen", "Zambia", "Zimbabwe",
)  # fmt: skip

# other names in common use -> the member state they name
OTHER_NAMES = {
    "Cape Verde": "Cabo Verde", "Ivory Coast": "Côte d'Ivoire", "Czech Republic": "Czechia",
    "Republic of the Congo": "Congo", "Swaziland": "Eswatini", "The Bahamas": "Bahamas", "The Gambia": "Gambia",
    "Burma": "Myanmar", "Federated States of Micronesia": "Micronesia", "Macedonia": "North Macedonia",
    "São Tomé and Príncipe": "Sao Tome and Principe", "East Timor": "Timor-Leste", "Türkiye": "Turkey",
    "United States of America": "United States",
}  # fmt: skip

COUNTRY_NAMES = frozenset(MEMBER_STATES) | frozenset(OTHER_NAMES)


def names_with_prefix(prefix: str) -> list[str]:
    """Every accepted name that starts with ``prefix`` (case-sensitive), sorted."""
    return sorted(n for n in COUNTRY_NAMES if n.startswith(prefix))


class CountryPrefix(Reward):
    """1 when the completion's first line is exactly ``" Name"``, Name an accepted country name (see the module) that
    starts with the row's ``prefix``, and the line is finished (a newline follows it; what comes after is not read),
    else 0. The extracted answer is Name."""

    name = "country_prefix"
    columns = ("prefix",)

    def extract(self, completion: str) -> str | None:
        line, newline, _ = completion.partition("\n")
        return line[1:] if newline and line.startswith(" ") and line[1:] in COUNTRY_NAMES else None

    def score(self, completions: Sequence[str], prefix: Sequence[str]) -> list[float | None]:
        out: list[float | None] = []
        for c, p in zip(completions, prefix):
            name = self.extract(c)
            out.append(float(name is not None and name.startswith(str(p))))
        return out


REWARDS.add("country_prefix", CountryPrefix)
