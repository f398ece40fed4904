"""A second set of candidate facts, in relations that ``rules.py`` does not use, with shared objects (few objects,
many subjects each: religions, continents, languages, positions, instruments, genres, currencies).

Written for issue #37 ("MEMIT on facts it was not tuned on") without copying ``rules.py``'s subjects or facts:
``build_facts_shared.py`` filters them by what SmolLM2-135M-Instruct knows, by ``build_facts.py``'s rule, into
``facts_shared.jsonl``. The structure is ``rules.RELATIONS``'s (rewrite prompt, paraphrase and generation templates,
``object -> [subjects]`` pools, ``also_true``); the prefix sentences, subject forms, seed and records folder stay
``rules.py``'s (the builders import them from there). ``OTHER_TEMPLATES`` are this set's second paraphrase
templates (``build_paraphrases_other.py``).

Relations that ``facts_independent.jsonl`` also has (continent, native_language, instrument, genre, currency,
religion) carry its relation ids, and none of its subjects of that relation is a candidate here: that file is
scored only, so no choice made on this set's dev split may touch one of its facts.
"""
from __future__ import annotations

RELATIONS: dict[str, dict] = {}

RELATIONS["continent"] = dict(
    prompt="{} is located on the continent of",
    paraphrases=[
        "Geographically, {} is part of the continent of",
        "On a map of the world, {} appears on the continent of",
        "{} lies on the continent of",
        "The continent that {} belongs to is",
        "Anyone who travels to {} arrives on the continent of",
    ],
    generation=["{} is", "{} is known for", "{} has a population of", "{} is a place where"],
    pools={
        " Europe": ["The Netherlands", "Belgium", "Austria", "Hungary", "Finland", "Denmark", "Sweden", "Iceland",
                    "Ireland", "Portugal", "Greece", "Croatia", "Romania", "Bulgaria", "Serbia", "Slovakia",
                    "Ukraine", "Lithuania", "Lisbon", "Vienna", "Prague", "Budapest", "Warsaw", "Copenhagen",
                    "Athens", "Dublin", "Brussels", "Helsinki"],
        " Asia": ["China", "Japan", "India", "Thailand", "South Korea", "Indonesia", "Malaysia", "The Philippines",
                  "Nepal", "Bangladesh", "Pakistan", "Afghanistan", "Iran", "Iraq", "Saudi Arabia", "Sri Lanka",
                  "Laos", "Myanmar", "Cambodia", "Singapore", "Tokyo", "Beijing", "Shanghai", "Seoul", "Bangkok",
                  "Mumbai", "Hanoi", "Kathmandu", "Jakarta", "Tehran"],
        " Africa": ["Nigeria", "Kenya", "Ethiopia", "Egypt", "Morocco", "Algeria", "Tunisia", "Libya", "Sudan",
                    "Senegal", "Mali", "Cameroon", "Uganda", "Tanzania", "Rwanda", "Zambia", "Zimbabwe", "Angola",
                    "Mozambique", "Botswana", "Namibia", "Madagascar", "Somalia", "Cairo", "Lagos", "Addis Ababa",
                    "Casablanca", "Dakar", "Kinshasa"],
        " South America": ["Brazil", "Argentina", "Chile", "Colombia", "Venezuela", "Ecuador", "Bolivia", "Paraguay",
                           "Uruguay", "Guyana", "Suriname", "Buenos Aires", "Rio de Janeiro", "São Paulo", "Lima",
                           "Bogotá", "Quito", "Montevideo", "Caracas", "Medellín"],
        " North America": ["The United States", "Canada", "Mexico", "Chicago", "Toronto", "Los Angeles", "Vancouver",
                           "Mexico City", "Montreal", "Houston", "Boston", "Seattle", "San Francisco", "Alaska",
                           "Texas", "Quebec", "Ontario", "California", "Florida"],
    },
)

# the faith that most of the people of a country (or region, or city) follow
RELATIONS["religion"] = dict(
    prompt="Most people in {} follow the religion of",
    paraphrases=[
        "The main religion of {} is",
        "The largest faith in {} is",
        "In {}, the religion practised by most of the population is",
        "The dominant religion in {} is",
        "A majority of the believers in {} practise",
    ],
    generation=["{} is", "{} is a place where", "{} has", "{} is known for"],
    pools={
        " Islam": ["Saudi Arabia", "Iran", "Iraq", "Afghanistan", "Bangladesh", "Turkey", "Egypt", "Morocco",
                   "Algeria", "Tunisia", "Libya", "Syria", "Jordan", "Yemen", "Oman", "Kuwait", "Qatar", "Malaysia",
                   "Senegal", "Mali", "Niger", "Somalia", "Sudan", "Uzbekistan", "Azerbaijan", "Mauritania",
                   "Brunei", "Kosovo"],
        " Christianity": ["Italy", "Spain", "Ireland", "Brazil", "Mexico", "Argentina", "Colombia", "Greece",
                          "Russia", "Portugal", "Croatia", "Romania", "Chile", "Peru", "Ethiopia", "Kenya",
                          "Uganda", "Zambia", "Armenia", "Georgia", "Ukraine", "Serbia", "Malta", "Venezuela",
                          "Bolivia", "Paraguay"],
        " Buddhism": ["Myanmar", "Sri Lanka", "Laos", "Bhutan", "Mongolia", "Tibet"],
        " Hinduism": ["India", "Nepal", "Bali", "Uttar Pradesh", "Bihar", "Gujarat", "Rajasthan", "Tamil Nadu",
                      "Maharashtra", "West Bengal", "Odisha", "Karnataka", "Varanasi"],
        " Judaism": ["Israel", "Jerusalem", "Tel Aviv", "Haifa", "Eilat", "Bnei Brak"],
    },
)

# festivals, scriptures, figures, places and practices of a religion
RELATIONS["part_of_religion"] = dict(
    prompt="{} is part of the religion of",
    paraphrases=[
        "{} belongs to the faith of",
        "The religion connected with {} is",
        "Scholars of religion link {} to",
        "{} is sacred to followers of",
        "{} has its roots in the religion of",
    ],
    generation=["{S} is", "{S} is important because", "{S} has", "{S} was"],
    pools={
        " Islam": ["Ramadan", "Eid al-Fitr", "Eid al-Adha", "The Quran", "The Kaaba", "The hajj",
                   "The Prophet Muhammad", "The Hadith", "Mecca", "Medina", "Sharia", "The Five Pillars",
                   "The Blue Mosque", "The Dome of the Rock", "Ashura", "The muezzin"],
        " Christianity": ["Easter", "Christmas", "Lent", "Good Friday", "Advent", "Pentecost", "The New Testament",
                          "The Gospel of Matthew", "Jesus Christ", "The Pope", "The Vatican", "Saint Peter",
                          "The Apostle Paul", "The Holy Trinity", "The Eucharist", "The rosary",
                          "The Sermon on the Mount"],
        " Judaism": ["Passover", "Hanukkah", "Yom Kippur", "Rosh Hashanah", "The Torah", "The Talmud",
                     "The Western Wall", "Shabbat", "Sukkot", "Purim", "The bar mitzvah", "Kosher food",
                     "The Star of David", "The menorah", "The Mishnah", "The synagogue"],
        " Hinduism": ["Diwali", "Holi", "The Bhagavad Gita", "The Vedas", "The Upanishads", "Shiva", "Vishnu",
                      "Krishna", "Ganesha", "Brahma", "Lakshmi", "Hanuman", "Durga", "The Ramayana",
                      "The Mahabharata", "Navaratri", "The Kumbh Mela"],
        " Buddhism": ["The Dalai Lama", "Siddhartha Gautama", "Vesak", "Zen", "The Four Noble Truths",
                      "The Eightfold Path", "Bodh Gaya", "The Tripitaka", "The Bodhi Tree", "The Lotus Sutra",
                      "Theravada", "Mahayana", "The Shwedagon Pagoda", "Borobudur", "The Potala Palace"],
        " Sikhism": ["The Golden Temple", "Guru Nanak", "The Guru Granth Sahib", "Vaisakhi", "The Khalsa",
                     "Guru Gobind Singh", "The Five Ks", "The langar"],
    },
)

# shared between faiths: Jesus is a prophet of Islam, the Torah is the start of the Christian Bible, Sikhs keep
# Diwali (Bandi Chhor Divas), Vaisakhi is a Hindu harvest festival too
RELATIONS["part_of_religion"]["also_true"] = {
    "Jesus Christ": [" Islam"], "The Torah": [" Christianity"], "Diwali": [" Sikhism"], "Vaisakhi": [" Hinduism"],
}

RELATIONS["native_language"] = dict(
    prompt="The native language of {} is",
    paraphrases=[
        "{} grew up speaking",
        "The first language that {} learned was",
        "As a child, {} spoke",
        "The language {} spoke at home was",
        "{} was a native speaker of",
    ],
    generation=["{} is", "{} was born", "{} is best known for", "{} became famous"],
    pools={
        " French": ["Charles Baudelaire", "Marcel Proust", "Alexandre Dumas", "Gustave Flaubert", "Émile Zola",
                    "Honoré de Balzac", "Coco Chanel", "Gérard Depardieu", "Brigitte Bardot", "Paul Cézanne",
                    "Antoine de Saint-Exupéry", "Simone de Beauvoir", "François Mitterrand", "Nicolas Sarkozy"],
        " German": ["Richard Wagner", "Thomas Mann", "Franz Kafka", "Hermann Hesse", "Bertolt Brecht", "Max Weber",
                    "Heinrich Heine", "Albrecht Dürer", "Michael Schumacher", "Boris Becker", "Marlene Dietrich",
                    "Arnold Schwarzenegger", "Robert Koch"],
        " Italian": ["Giuseppe Garibaldi", "Giacomo Puccini", "Antonio Vivaldi", "Federico Fellini", "Sophia Loren",
                     "Umberto Eco", "Alessandro Volta", "Maria Montessori", "Giorgio Armani", "Valentino Rossi",
                     "Italo Calvino", "Primo Levi", "Gianni Versace"],
        " Spanish": ["Gabriel García Márquez", "Pablo Neruda", "Frida Kahlo", "Federico García Lorca", "Shakira",
                     "Penélope Cruz", "Antonio Banderas", "Julio Iglesias", "Simón Bolívar", "Fidel Castro",
                     "Isabel Allende", "Mario Vargas Llosa", "Octavio Paz", "Javier Bardem"],
        " Russian": ["Ivan Turgenev", "Sergei Rachmaninoff", "Igor Stravinsky", "Dmitri Shostakovich",
                     "Boris Pasternak", "Mikhail Lermontov", "Maria Sharapova", "Garry Kasparov",
                     "Valentina Tereshkova", "Nikita Khrushchev", "Sergei Prokofiev", "Alexander Solzhenitsyn",
                     "Anna Pavlova", "Peter the Great"],
        " Japanese": ["Hideo Kojima", "Shigeru Miyamoto", "Osamu Tezuka", "Katsushika Hokusai", "Yasunari Kawabata",
                      "Kenzaburō Ōe", "Akira Toriyama", "Ichiro Suzuki", "Oda Nobunaga", "Tokugawa Ieyasu",
                      "Emperor Akihito", "Ryuichi Sakamoto", "Takeshi Kitano", "Junichiro Koizumi"],
        " Portuguese": ["Luís de Camões", "Fernando Pessoa", "José Saramago", "Vasco da Gama", "Ferdinand Magellan",
                        "Amália Rodrigues", "José Mourinho", "Luís Figo", "Machado de Assis",
                        "Jorge Amado", "Kaká", "Heitor Villa-Lobos"],
        " Chinese": ["Lu Xun", "Li Bai", "Du Fu", "Sun Tzu", "Laozi", "Chiang Kai-shek", "Zhou Enlai",
                     "Zhang Yimou", "Ai Weiwei", "Gong Li", "Mo Yan", "Li Na", "Qin Shi Huang"],
        " Polish": ["Marie Curie", "Frédéric Chopin", "Wisława Szymborska", "Czesław Miłosz", "Joseph Conrad",
                    "Adam Mickiewicz", "Krzysztof Kieślowski", "Tadeusz Kościuszko", "Stanisław Lem",
                    "Iga Świątek", "Andrzej Duda"],
        " Dutch": ["Rembrandt", "Vincent van Gogh", "Johannes Vermeer", "Erasmus", "Piet Mondrian", "M. C. Escher",
                   "Hieronymus Bosch", "Christiaan Huygens", "Antonie van Leeuwenhoek", "Arjen Robben",
                   "Max Verstappen", "Hugo Grotius", "Mark Rutte"],
        " Arabic": ["Umm Kulthum", "Yasser Arafat", "Saddam Hussein", "Muammar Gaddafi", "Khalil Gibran",
                    "Mahmoud Darwish", "Ibn Khaldun", "Averroes", "Bashar al-Assad", "Fairuz", "Taha Hussein",
                    "Amr Diab"],
    },
)

# the language a book, play, poem, opera, song, film or newspaper was first made in (no English originals: the
# second paraphrase set speaks of translations)
RELATIONS["original_language"] = dict(
    prompt="The original language of {} is",
    paraphrases=[
        "{} was first written in",
        "{} was originally created in",
        "To enjoy {} in its original form, you have to know",
        "The first version of {} was in",
        "Before it was ever translated, {} existed only in",
    ],
    generation=["{S} is", "{S} was", "{S} is known for", "{S} became famous"],
    pools={
        " French": ["Les Misérables", "The Count of Monte Cristo", "The Three Musketeers", "Madame Bovary",
                    "The Little Prince", "Candide", "The Stranger", "Germinal",
                    "Twenty Thousand Leagues Under the Sea", "Around the World in Eighty Days",
                    "The Hunchback of Notre-Dame", "The Phantom of the Opera", "Cyrano de Bergerac", "Tartuffe",
                    "Waiting for Godot", "La Marseillaise", "Le Monde", "The Flowers of Evil"],
        " German": ["Faust", "The Metamorphosis", "The Trial", "Thus Spoke Zarathustra", "The Communist Manifesto",
                    "Das Kapital", "All Quiet on the Western Front", "The Magic Mountain", "Steppenwolf",
                    "The Sorrows of Young Werther", "The Neverending Story", "Der Spiegel", "The Magic Flute",
                    "Silent Night", "Grimms' Fairy Tales", "The Tin Drum", "Ode to Joy"],
        " Italian": ["The Divine Comedy", "The Decameron", "The Prince", "The Adventures of Pinocchio",
                     "The Name of the Rose", "La traviata", "Rigoletto", "Aida", "Tosca", "Madama Butterfly",
                     "La bohème", "Don Giovanni",
                     "Corriere della Sera", "The Betrothed", "Life Is Beautiful"],
        " Spanish": ["Don Quixote", "One Hundred Years of Solitude", "Love in the Time of Cholera",
                     "The House of the Spirits", "El País", "Despacito", "La Bamba", "Guantanamera",
                     "Pan's Labyrinth", "The Shadow of the Wind", "Blood Wedding", "Like Water for Chocolate",
                     "Pedro Páramo", "Bésame Mucho", "Chronicle of a Death Foretold"],
        " Russian": ["Anna Karenina", "Crime and Punishment", "The Brothers Karamazov", "Doctor Zhivago",
                     "The Master and Margarita", "Eugene Onegin", "Dead Souls", "Fathers and Sons", "The Idiot",
                     "The Gulag Archipelago", "Pravda", "The Seagull", "Uncle Vanya", "The Cherry Orchard",
                     "Katyusha", "One Day in the Life of Ivan Denisovich"],
        " Japanese": ["The Tale of Genji", "Norwegian Wood", "Kafka on the Shore", "Rashomon", "Seven Samurai",
                      "Spirited Away", "My Neighbor Totoro", "Naruto", "One Piece", "Dragon Ball", "Death Note",
                      "Tokyo Story", "Snow Country", "The Pillow Book", "Sailor Moon"],
        " Portuguese": ["The Alchemist", "The Lusiads", "Blindness", "The Girl from Ipanema", "Dom Casmurro",
                        "The Book of Disquiet", "City of God", "Central Station", "Gabriela, Clove and Cinnamon",
                        "Mas que Nada", "Captains of the Sands", "The Hour of the Star",
                        "Dona Flor and Her Two Husbands"],
    },
)

RELATIONS["football_position"] = dict(
    prompt="In football, {} played as a",
    paraphrases=[
        "The position of {} on the football pitch was",
        "{} was known around the world as a talented",
        "Coaches picked {} to play as a",
        "In every match, {} lined up as the team's",
        "Fans remember {} as a great",
    ],
    generation=["{} is", "{} was born", "{} played for", "{} joined"],
    pools={
        " goalkeeper": ["Manuel Neuer", "Gianluigi Buffon", "Iker Casillas", "Oliver Kahn", "Lev Yashin",
                        "Peter Schmeichel", "Thibaut Courtois", "Alisson Becker", "Petr Čech", "Edwin van der Sar",
                        "Dino Zoff", "Gordon Banks", "Jan Oblak", "Keylor Navas", "David de Gea", "Hugo Lloris",
                        "Marc-André ter Stegen", "Emiliano Martínez", "Jordan Pickford"],
        " defender": ["Sergio Ramos", "Paolo Maldini", "Franco Baresi", "Virgil van Dijk", "Carles Puyol",
                      "Fabio Cannavaro", "Gerard Piqué", "John Terry", "Rio Ferdinand", "Roberto Carlos", "Cafu",
                      "Philipp Lahm", "Marcelo", "Thiago Silva", "Alessandro Nesta", "Giorgio Chiellini",
                      "Raphaël Varane", "Ashley Cole", "Nemanja Vidić", "Bobby Moore"],
        " midfielder": ["Andrés Iniesta", "Xavi Hernández", "Luka Modrić", "Toni Kroos", "Andrea Pirlo",
                        "Steven Gerrard", "Frank Lampard", "Kevin De Bruyne", "Paul Scholes", "Patrick Vieira",
                        "Claude Makélélé", "N'Golo Kanté", "Sergio Busquets", "Bastian Schweinsteiger",
                        "Paul Pogba", "Michael Ballack", "Xabi Alonso", "Roy Keane", "Lothar Matthäus",
                        "Clarence Seedorf"],
        " striker": ["Robert Lewandowski", "Harry Kane", "Erling Haaland", "Karim Benzema", "Jamie Vardy",
                     "Gerd Müller", "Romário", "Marco van Basten", "Gabriel Batistuta", "Alan Shearer",
                     "Didier Drogba", "Samuel Eto'o", "Sergio Agüero", "Edinson Cavani", "Miroslav Klose",
                     "Filippo Inzaghi", "Ruud van Nistelrooy", "Fernando Torres", "Andriy Shevchenko", "Ian Rush"],
    },
)

# Lahm also played in midfield, Matthäus ended his career as a sweeper
RELATIONS["football_position"]["also_true"] = {"Philipp Lahm": [" midfielder"], "Lothar Matthäus": [" defender"]}

RELATIONS["instrument"] = dict(
    prompt="The instrument played by {} is the",
    paraphrases=[
        "{} is best known for playing the",
        "{} became famous as a master of the",
        "On stage, {} always performed on the",
        "Music students study the recordings of {} to learn the",
        "The instrument that made {} famous is the",
    ],
    generation=["{} is", "{} was born", "{} recorded", "{} performed"],
    pools={
        " piano": ["Franz Liszt", "Glenn Gould", "Arthur Rubinstein", "Vladimir Ashkenazy", "Martha Argerich",
                   "Elton John", "Billy Joel", "Thelonious Monk", "Herbie Hancock", "Ray Charles", "Alicia Keys",
                   "Oscar Peterson", "Jerry Lee Lewis", "Fats Domino", "Keith Jarrett", "Clara Schumann"],
        " violin": ["Niccolò Paganini", "Jascha Heifetz", "Yehudi Menuhin", "Joshua Bell", "Anne-Sophie Mutter",
                    "David Oistrakh", "Fritz Kreisler", "Nigel Kennedy", "Hilary Hahn", "André Rieu", "Vanessa-Mae",
                    "Stéphane Grappelli", "Isaac Stern", "Maxim Vengerov", "Lindsey Stirling"],
        " guitar": ["Eric Clapton", "Jimmy Page", "Eddie Van Halen", "B.B. King", "Carlos Santana", "Slash",
                    "Jeff Beck", "Keith Richards", "Andrés Segovia", "Django Reinhardt", "Brian May", "Chuck Berry",
                    "David Gilmour", "Stevie Ray Vaughan", "Mark Knopfler", "Paco de Lucía"],
        " drums": ["Ringo Starr", "Keith Moon", "Neil Peart", "Buddy Rich", "Lars Ulrich", "Travis Barker",
                   "Charlie Watts", "Gene Krupa", "Art Blakey", "Max Roach", "Ginger Baker", "Stewart Copeland",
                   "Tommy Lee", "Chad Smith", "Taylor Hawkins"],
        " saxophone": ["Charlie Parker", "Sonny Rollins", "Stan Getz", "Kenny G", "Lester Young", "Coleman Hawkins",
                       "Dexter Gordon", "Cannonball Adderley", "Ornette Coleman", "Wayne Shorter",
                       "Clarence Clemons", "Branford Marsalis"],
        " trumpet": ["Miles Davis", "Dizzy Gillespie", "Chet Baker", "Wynton Marsalis", "Herb Alpert",
                     "Clifford Brown", "Freddie Hubbard", "Maynard Ferguson", "Lee Morgan", "Roy Eldridge",
                     "Arturo Sandoval"],
        " cello": ["Pablo Casals", "Jacqueline du Pré", "Mstislav Rostropovich", "Steven Isserlis",
                   "Julian Lloyd Webber", "Sheku Kanneh-Mason", "Mischa Maisky", "Gautier Capuçon"],
    },
)

# Ornette Coleman also recorded on trumpet and violin
RELATIONS["instrument"]["also_true"] = {"Ornette Coleman": [" trumpet", " violin"]}

RELATIONS["genre"] = dict(
    prompt="The musical genre of {} is",
    paraphrases=[
        "{} is famous for performing",
        "The style of music associated with {} is",
        "Fans of {} mostly listen to",
        "{} is one of the biggest names in",
        "Radio stations that play {} specialise in",
    ],
    generation=["{S} is", "{S} released", "{S} became famous", "{S} performed"],
    pools={
        " rock": ["The Rolling Stones", "Led Zeppelin", "Queen", "Pink Floyd", "The Who", "U2", "Aerosmith",
                  "The Doors", "Bruce Springsteen", "Foo Fighters", "Pearl Jam", "Nirvana", "Bon Jovi"],
        " jazz": ["Ella Fitzgerald", "Billie Holiday", "Count Basie", "Benny Goodman", "Dave Brubeck",
                  "Sarah Vaughan", "Glenn Miller", "Cab Calloway", "Jelly Roll Morton", "Charles Mingus",
                  "Bill Evans", "Artie Shaw", "Sun Ra"],
        " hip hop": ["Eminem", "Jay-Z", "Snoop Dogg", "Kanye West", "Dr. Dre", "50 Cent", "Nas",
                     "The Notorious B.I.G.", "Kendrick Lamar", "Lil Wayne", "Public Enemy", "Run-DMC",
                     "Wu-Tang Clan"],
        " country": ["Dolly Parton", "Willie Nelson", "Garth Brooks", "Shania Twain", "Kenny Rogers",
                     "Hank Williams", "Patsy Cline", "Loretta Lynn", "George Strait", "Tim McGraw", "Reba McEntire",
                     "Carrie Underwood", "Merle Haggard"],
        " reggae": ["Peter Tosh", "Jimmy Cliff", "Bunny Wailer", "Toots and the Maytals", "UB40", "Burning Spear",
                    "Gregory Isaacs", "Dennis Brown", "Ziggy Marley", "Shaggy", "Desmond Dekker", "Steel Pulse"],
        " heavy metal": ["Metallica", "Black Sabbath", "Iron Maiden", "Judas Priest", "Slayer", "Megadeth",
                         "Motörhead", "Ozzy Osbourne", "Pantera", "Slipknot", "Anthrax"],
        " blues": ["Muddy Waters", "Robert Johnson", "John Lee Hooker", "Howlin' Wolf", "Buddy Guy", "Albert King",
                   "Bessie Smith", "Lead Belly", "Willie Dixon", "T-Bone Walker", "Big Mama Thornton",
                   "Elmore James"],
        " classical": ["Joseph Haydn", "Johannes Brahms", "Antonín Dvořák", "Edvard Grieg", "Jean Sibelius",
                       "Felix Mendelssohn", "Robert Schumann", "Maurice Ravel", "Edward Elgar", "Gustav Holst",
                       "Anton Bruckner", "Camille Saint-Saëns", "Georg Philipp Telemann"],
        " opera": ["Maria Callas", "Enrico Caruso", "Plácido Domingo", "José Carreras", "Renée Fleming",
                   "Montserrat Caballé", "Joan Sutherland", "Cecilia Bartoli", "Anna Netrebko", "Kiri Te Kanawa",
                   "Jussi Björling", "Jonas Kaufmann"],
    },
)

# heavy metal is rock, hard rock borders on metal and grew out of the blues; opera is classical music
_GENRE = RELATIONS["genre"]
_GENRE["also_true"] = {s: [" rock"] for s in _GENRE["pools"][" heavy metal"]}
_GENRE["also_true"].update({s: [" classical"] for s in _GENRE["pools"][" opera"]})
_GENRE["also_true"].update({s: [" opera"] for s in _GENRE["pools"][" classical"]})
_GENRE["also_true"].update({
    "Led Zeppelin": [" heavy metal", " blues"], "Aerosmith": [" heavy metal", " blues"], "Bon Jovi": [" heavy metal"],
    "The Rolling Stones": [" blues"], "Queen": [" heavy metal"], "Billie Holiday": [" blues"],
    "Bessie Smith": [" jazz"], "Jelly Roll Morton": [" blues"],
})

RELATIONS["currency"] = dict(
    prompt="The currency used in {} is the",
    paraphrases=[
        "In {}, people pay for things with the",
        "Shops in {} set their prices in the",
        "Travellers to {} need to change their money into the",
        "The money of {} is called the",
        "The legal tender in {} is the",
    ],
    generation=["{} is", "{} has", "{} is known for", "{} is a place where"],
    pools={
        " euro": ["France", "Germany", "Spain", "Portugal", "Greece", "Holland", "Belgium", "Austria", "Ireland",
                  "Finland", "Slovakia", "Slovenia", "Estonia", "Latvia", "Lithuania", "Luxembourg", "Malta",
                  "Cyprus", "Croatia", "Monaco", "Montenegro", "San Marino"],
        " dollar": ["Australia", "New Zealand", "Singapore", "Jamaica", "Hong Kong", "Barbados", "Fiji", "Belize",
                    "Liberia", "Namibia", "Guyana", "Texas", "California", "Florida", "Alaska"],
        " peso": ["Argentina", "Chile", "Colombia", "Cuba", "Uruguay", "Buenos Aires", "Bogotá", "Havana",
                  "Montevideo", "Manila", "Medellín"],
        " pound": ["England", "Scotland", "Wales", "Britain", "Egypt", "Lebanon", "Syria", "Sudan", "Gibraltar",
                   "London", "Cairo", "Manchester"],
        " rupee": ["Pakistan", "Sri Lanka", "Nepal", "Mauritius", "Mumbai", "Delhi", "Karachi", "Kathmandu",
                   "Colombo", "Bangalore"],
        " franc": ["Liechtenstein", "Senegal", "Ivory Coast", "Cameroon", "Mali", "Niger", "Burkina Faso", "Benin",
                   "Togo", "Gabon", "Chad", "Rwanda", "Burundi", "Guinea", "Djibouti", "Geneva", "Zurich", "Basel"],
        " dinar": ["Algeria", "Tunisia", "Libya", "Iraq", "Jordan", "Kuwait", "Bahrain", "Serbia", "Baghdad",
                   "Belgrade"],
        " yen": ["Japan", "Tokyo", "Osaka", "Kyoto", "Hiroshima", "Okinawa", "Hokkaido"],
        " yuan": ["China", "Beijing", "Shanghai", "Guangzhou", "Shenzhen", "Wuhan", "Chengdu"],
        " ruble": ["Russia", "Belarus", "Moscow", "Saint Petersburg", "Siberia", "Vladivostok", "Novosibirsk"],
    },
)


# ---------------------------------------------------------------------------
# The second paraphrase set (test records only, build_paraphrases_other.py): 7 templates per relation, in forms
# that share no template with the rewrite prompt or the paraphrases above ('{}' mid-sentence form, '{S}' as written).
# ---------------------------------------------------------------------------
OTHER_TEMPLATES: dict[str, list[str]] = {
    "continent": [
        "Which continent is {} on? The answer is",
        "Q: On which continent would you find {}? A:",
        "Place: {S}. Continent:",
        "My cousin moved to {} last year, so she now lives in",
        "When you spin a globe and stop at {}, your finger is on",
        "The documentary team spent a month filming wildlife. Their next stop was {}, in another corner of",
        "Of all the places I have been, {} is my favourite spot in",
    ],
    "religion": [
        "Q: What is the most common religion in {}? A:",
        "Region: {S}. Majority religion:",
        "Which religion do most people in {} practise? The answer is",
        "I grew up in {}, where most of my neighbours practised",
        "The census counted the believers in {} and found that most of them follow",
        "Walking through {} on a holiday, you see how deeply life there is shaped by",
        "For most families in {}, daily life is guided by",
    ],
    "part_of_religion": [
        "Q: Which religion does {} come from? A:",
        "Topic: {S}. Religion:",
        "Which faith is {} associated with? The answer is",
        "In my religious studies class, the teacher explained {} as part of the traditions of",
        "The museum has a whole room about {}, which is central to",
        "Believers around the world know {} as an important part of",
        "My friend told me all about {}, since her family practises",
    ],
    "native_language": [
        "Q: What was the first language of {}? A:",
        "Name: {S}. Mother language:",
        "Which language did {} speak from birth? The answer is",
        "I am reading the letters of {} in the original, so I had to learn",
        "In the interview, {} answered the first question in fluent, native",
        "The biography says that {} dreamed and counted in",
        "Before learning any other language, {} spoke only",
    ],
    "original_language": [
        "Q: In what language was {} created? A:",
        "Title: {S}. Language:",
        "Which language does {} use in its original form? The answer is",
        "My teacher read {} to us in translation, but the original is in",
        "I found a copy of {} in a second-hand shop. It was not a translation; it was in the original",
        "The translators worked for years on {}, turning it into English from",
        "Scholars who study {} closely always read it in",
    ],
    "football_position": [
        "Q: What position did {} play? A:",
        "Player: {S}. Position:",
        "Which position did {} play on the pitch? The answer is",
        "My little brother's hero is {}, so he wants to become a",
        "When the team sheet was read out before the final, {} was named as the starting",
        "The sports magazine ranked {} among the best ever to play as a",
        "Few players have matched {}, a legendary",
    ],
    "instrument": [
        "Q: Which instrument does {} play? A: The",
        "Musician: {S}. Instrument:",
        "Which instrument is {} famous for? The answer is the",
        "After hearing {} in concert, I went home and started practising the",
        "The old record shop had a whole section for {}, the legend of the",
        "At the festival, {} walked on stage and picked up the",
        "Thanks to {}, a whole generation fell in love with the",
    ],
    "genre": [
        "Q: What kind of music does {} make? A:",
        "Artist: {S}. Genre:",
        "Which style of music is {} known for? The answer is",
        "My father has every record by {}, because he has always loved",
        "The music festival this summer is headlined by {}, so expect plenty of",
        "If you enjoy {}, you probably enjoy other stars of",
        "The documentary about {} traces the history of",
    ],
    "currency": [
        "Q: What money do people use in {}? A: The",
        "Place: {S}. Currency:",
        "Which currency do you need in {}? The answer is the",
        "Before my trip to {}, I went to the bank and changed my savings into the local currency, the",
        "Prices at the markets of {} are written in the",
        "The menu at a café in {} lists every price in the",
        "On her first day in {}, my sister took cash out of a machine and got her first banknotes of the",
    ],
}
