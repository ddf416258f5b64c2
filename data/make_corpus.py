#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes data/corpus.txt: a self-written, procedurally generated English corpus (no third-party
text, so it carries no license beyond the project's). Deterministic: the same file every run.
It only needs to be English-like enough for a byte-level model's loss to fall visibly.

    python3 data/make_corpus.py > data/corpus.txt
"""
import random

rng = random.Random(20240520)

PEOPLE = ["the miller", "the baker", "a young shepherd", "the old sailor", "the schoolteacher",
          "a traveller from the north", "the blacksmith", "the weaver", "the river pilot",
          "the innkeeper", "a quiet clerk", "the gardener", "the lamplighter", "a fisherman",
          "the potter", "the mapmaker", "the beekeeper", "a carpenter", "the postmistress",
          "the clockmaker"]
NAMES = ["Ada", "Tomas", "Mira", "Ewan", "Lena", "Oskar", "Ruth", "Felix", "Nora", "Hugo",
         "Iris", "Jonah", "Clara", "Silas", "Greta", "Milo", "Vera", "Anton", "Elsie", "Bram"]
PLACES = ["the harbour", "the market square", "the mill by the river", "the long road",
          "the hill above the town", "the old library", "the orchard", "the bridge",
          "the station", "the lighthouse", "the forest edge", "the workshop", "the meadow",
          "the school", "the quay", "the chapel garden", "the salt marsh", "the high pasture"]
THINGS = ["a lantern", "a letter", "a basket of apples", "a wooden box", "a map", "a bell",
          "a loaf of bread", "a coil of rope", "a small compass", "a jar of honey",
          "a bundle of wool", "a brass key", "an old clock", "a net", "a notebook",
          "a cup of tea", "a pair of boots", "a kite", "a clay pot", "a violin"]
ADJ = ["cold", "quiet", "bright", "narrow", "windy", "grey", "warm", "busy", "empty", "green",
       "late", "early", "steep", "calm", "heavy", "gentle", "distant", "familiar", "small", "wide"]
WEATHER = ["the rain came down softly", "a thin fog lay over the water",
           "the wind turned to the west", "the sun broke through the clouds",
           "snow had fallen in the night", "the air smelled of salt and smoke",
           "the first frost silvered the fields", "a warm breeze moved the leaves",
           "thunder rolled far out at sea", "the evening was clear and still"]
VERBS = ["carried", "found", "mended", "painted", "sold", "lost", "opened", "counted",
         "wrapped", "cleaned", "borrowed", "returned", "measured", "described", "buried"]
MOTION = ["walked", "hurried", "wandered", "climbed", "drove", "rowed", "cycled", "ran"]
FEEL = ["happy", "tired", "curious", "worried", "proud", "surprised", "patient", "hopeful"]
TIME = ["In the morning", "At noon", "Late in the afternoon", "That evening", "Before dawn",
        "On the following day", "Early in spring", "During the long winter", "By midsummer",
        "After the harvest", "Some years later", "On market day"]
CONNECT = ["and", "but", "so", "while", "because", "although", "until", "when"]
TOPICS = ["The Town by the River", "Notes on the Harvest", "A Letter Home", "The Lighthouse Keeper",
          "How the Bridge Was Built", "Winter Stories", "The Market", "A Journey North",
          "The Clockmaker's Apprentice", "Small Things", "The Year of the Flood", "Evening Walks"]


def cap(s):
    return s[0].upper() + s[1:]


def person():
    return rng.choice(PEOPLE) if rng.random() < 0.6 else rng.choice(NAMES)


def clause():
    kind = rng.randrange(8)
    if kind == 0:
        return f"{person()} {rng.choice(MOTION)} to {rng.choice(PLACES)}"
    if kind == 1:
        return f"{person()} {rng.choice(VERBS)} {rng.choice(THINGS)}"
    if kind == 2:
        return rng.choice(WEATHER)
    if kind == 3:
        return f"{rng.choice(PLACES)} was {rng.choice(ADJ)} and {rng.choice(ADJ)}"
    if kind == 4:
        return f"{person()} felt {rng.choice(FEEL)}"
    if kind == 5:
        return f"{person()} gave {rng.choice(THINGS)} to {person()}"
    if kind == 6:
        n = rng.randrange(2, 40)
        return f"there were {n} {rng.choice(['boats', 'houses', 'sheep', 'lamps', 'people', 'trees', 'steps', 'windows'])} near {rng.choice(PLACES)}"
    return f"{person()} said that {rng.choice(THINGS)} belonged to {person()}"


def sentence():
    r = rng.random()
    if r < 0.35:
        s = f"{rng.choice(TIME)}, {clause()}."
    elif r < 0.7:
        s = f"{cap(clause())} {rng.choice(CONNECT)} {clause()}."
    elif r < 0.85:
        who = rng.choice(NAMES)
        s = f"\"{cap(clause())},\" said {who}. \"{cap(clause())}.\""
        return s
    else:
        s = f"{cap(clause())}."
    return cap(s)


def paragraph():
    return " ".join(sentence() for _ in range(rng.randrange(3, 8)))


def main():
    out = []
    size = 0
    chapter = 1
    while size < 400_000:
        title = f"Chapter {chapter}. {rng.choice(TOPICS)}"
        block = [title, ""]
        for _ in range(rng.randrange(4, 9)):
            block.append(paragraph())
            block.append("")
        text = "\n".join(block) + "\n"
        out.append(text)
        size += len(text)
        chapter += 1
    print("".join(out), end="")


if __name__ == "__main__":
    main()
