"""The candidate facts and the text rules that the record builders share.

``build_facts.py`` (and so ``build_facts_gemma.py``) filters these candidates by what a model knows;
``build_paraphrases_other.py`` writes the second paraphrase set with the same relations, prefix sentences, subject
forms and seed. Both import this module; neither imports the other's internals the other way round.
"""
from __future__ import annotations

import os

SEED = 1234

# The records live in the package (package data, read by interp.editing.facts.load_records): the builders write there.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(REPO, "interp", "editing", "records")


# ---------------------------------------------------------------------------
# Candidate facts.
#
# Each relation has:
#   prompt       - the rewrite template, "{}" = subject (subject at the start of
#                  the prompt or right after a space)
#   paraphrases  - templates asking the same fact in other words; "{}" is the
#                  subject in mid-sentence form (a leading "The " is lowercased)
#   generation   - templates that start with the subject
#   pools        - object (target, with leading space) -> subjects.  Every
#                  subject is a candidate record AND a candidate neighbor for
#                  the other subjects of the same object.
#   also_true    - optional {subject: [objects]}: other objects that are also
#                  true of the subject (e.g. a scholar's second field); they are
#                  never used as its target_new, and the subject is not used as a
#                  neighbor of a record whose target_new is one of them
# ---------------------------------------------------------------------------
RELATIONS: dict[str, dict] = {}

RELATIONS["located_in_city"] = dict(
    prompt="{} is located in the city of",
    paraphrases=[
        "Where is {}? It is in the city of",
        "Tourists who want to see {} have to travel to the city of",
        "{S}, a famous landmark, stands in the city of",
        "The city that is home to {} is",
        "If you visit {}, you will be in the city of",
    ],
    generation=["{S} is", "{S} is famous for", "{S} was built", "{S} attracts visitors because"],
    pools={
        " Paris": ["The Eiffel Tower", "The Louvre", "Notre-Dame Cathedral", "The Arc de Triomphe",
                   "The Musée d'Orsay", "The Champs-Élysées", "The Sacré-Cœur Basilica", "The Palais Garnier",
                   "The Centre Pompidou", "The Pont Neuf", "The Place de la Concorde", "The Sorbonne",
                   "The Moulin Rouge", "The Père Lachaise Cemetery", "The Luxembourg Garden", "Les Invalides",
                   "The Tuileries Garden", "The Orangerie Museum"],
        " London": ["Big Ben", "Tower Bridge", "Buckingham Palace", "The British Museum", "Westminster Abbey",
                    "The Tower of London", "The London Eye", "St Paul's Cathedral", "Trafalgar Square",
                    "The National Gallery", "Piccadilly Circus", "Hyde Park", "The Houses of Parliament",
                    "The Tate Modern", "Wembley Stadium", "Kensington Palace", "10 Downing Street",
                    "The Natural History Museum in South Kensington", "Covent Garden", "The Victoria and Albert Museum"],
        " Rome": ["The Colosseum", "The Trevi Fountain", "The Pantheon", "The Roman Forum", "The Spanish Steps",
                  "The Circus Maximus", "Piazza Navona", "Castel Sant'Angelo", "The Palatine Hill",
                  "The Baths of Caracalla", "Villa Borghese", "The Arch of Constantine", "The Capitoline Museums",
                  "The Appian Way"],
        " New York": ["The Statue of Liberty", "The Empire State Building", "Central Park", "Times Square",
                      "The Brooklyn Bridge", "The Metropolitan Museum of Art", "The Museum of Modern Art",
                      "Rockefeller Center", "The Chrysler Building", "Wall Street", "Grand Central Terminal",
                      "One World Trade Center", "Madison Square Garden", "The Guggenheim Museum", "Yankee Stadium",
                      "Carnegie Hall", "The Flatiron Building", "The American Museum of Natural History",
                      "The United Nations Headquarters"],
        " Washington": ["The White House", "The Lincoln Memorial", "The United States Capitol",
                        "The Smithsonian Institution", "The Jefferson Memorial", "The National Mall",
                        "The Library of Congress", "The Vietnam Veterans Memorial", "The Supreme Court Building",
                        "The National Air and Space Museum", "Georgetown University"],
        " Berlin": ["The Brandenburg Gate", "The Reichstag building", "Checkpoint Charlie", "Museum Island",
                    "Alexanderplatz", "The Pergamon Museum", "Potsdamer Platz", "The Kurfürstendamm",
                    "The Tiergarten", "The East Side Gallery", "The Humboldt University", "The Fernsehturm"],
        " Moscow": ["The Kremlin", "Red Square", "Saint Basil's Cathedral", "The Bolshoi Theatre",
                    "Lenin's Mausoleum", "Gorky Park", "The Tretyakov Gallery",
                    "The Cathedral of Christ the Saviour", "The Ostankino Tower", "The Lomonosov University",
                    "The Pushkin Museum"],
        " Beijing": ["The Forbidden City", "Tiananmen Square", "The Temple of Heaven", "The Summer Palace",
                     "The Great Hall of the People", "The National Museum of China", "Peking University",
                     "Tsinghua University", "The Bird's Nest stadium", "The Lama Temple", "Beihai Park"],
        " Tokyo": ["The Tokyo Skytree", "Senso-ji", "The Meiji Shrine", "The Shibuya Crossing",
                   "The Tsukiji Fish Market", "Akihabara", "Ueno Park", "The Imperial Palace of Japan",
                   "The Ginza district", "The Shinjuku Gyoen garden", "Roppongi Hills"],
        " Barcelona": ["The Sagrada Familia", "Park Güell", "Camp Nou", "Casa Batlló", "La Rambla", "Casa Milà",
                       "The Gothic Quarter", "Montjuïc", "The Palau de la Música Catalana", "The Picasso Museum"],
        " Madrid": ["The Prado Museum", "The Santiago Bernabéu Stadium", "The Puerta del Sol", "The Plaza Mayor",
                    "Retiro Park", "The Reina Sofía Museum", "The Gran Vía", "The Almudena Cathedral",
                    "The Thyssen-Bornemisza Museum"],
        " Venice": ["St. Mark's Basilica", "The Rialto Bridge", "The Doge's Palace", 
                    "The Bridge of Sighs", "St Mark's Square", "The Peggy Guggenheim Collection",
                    "The Gallerie dell'Accademia", "The Teatro La Fenice"],
        " Florence": ["The Uffizi Gallery", "The Ponte Vecchio", "The Palazzo Vecchio", "The Pitti Palace",
                      "The Boboli Gardens", "The Accademia Gallery", "The Basilica of Santa Croce",
                      "Michelangelo's David", "The Duomo of Santa Maria del Fiore", "The Piazza della Signoria"],
        " Istanbul": ["The Hagia Sophia", "The Blue Mosque", "Topkapi Palace", "The Grand Bazaar", "The Galata Tower",
                      "The Bosphorus Bridge", "Dolmabahçe Palace", "The Basilica Cistern", "Taksim Square",
                      "The Süleymaniye Mosque"],
        " Athens": ["The Acropolis", "The Parthenon", "The Temple of Olympian Zeus", "The Ancient Agora",
                    "The Erechtheion", "The Panathenaic Stadium", "Syntagma Square", "The Temple of Hephaestus",
                    "Mount Lycabettus"],
        " San Francisco": ["The Golden Gate Bridge", "Alcatraz Island", "Fisherman's Wharf", "Lombard Street",
                           "Coit Tower", "The Transamerica Pyramid", "Golden Gate Park", "The Painted Ladies",
                           "Haight-Ashbury"],
        " Los Angeles": ["The Hollywood Sign", "The Hollywood Walk of Fame", "The Griffith Observatory",
                         "The Getty Center", "Dodger Stadium", "The Walt Disney Concert Hall",
                         "Universal Studios Hollywood", "The TCL Chinese Theatre", "The Staples Center"],
        " Chicago": ["The Willis Tower", "Wrigley Field", "Navy Pier", "Cloud Gate", "Millennium Park",
                     "The Field Museum", "Soldier Field", "The Magnificent Mile"],
        " Jerusalem": ["The Western Wall", "The Dome of the Rock", "The Church of the Holy Sepulchre",
                       "The Al-Aqsa Mosque", "The Temple Mount", "The Mount of Olives", "Yad Vashem",
                       "The Via Dolorosa"],
        " Amsterdam": ["The Rijksmuseum", "The Anne Frank House", "The Van Gogh Museum", "Dam Square",
                       "The Vondelpark", "The Concertgebouw", "The Heineken Experience"],
        " Vienna": ["Schönbrunn Palace", "St. Stephen's Cathedral", "The Hofburg", "The Belvedere Palace",
                    "The Prater", "The Musikverein", "The Albertina"],
        " Prague": ["The Charles Bridge", "The Old Town Square", "St. Vitus Cathedral", "Wenceslas Square",
                    "The Dancing House", "The Jewish Quarter of Josefov"],
        " Kyoto": ["Kinkaku-ji", "The Fushimi Inari Shrine", "Kiyomizu-dera", "Ginkaku-ji", "Ryoan-ji",
                   "Nijo Castle", "The Gion district"],
        " Dubai": ["The Burj Khalifa", "The Burj Al Arab", "The Palm Jumeirah", "The Dubai Mall", "The Dubai Marina",
                   "The Dubai Frame"],
        " Cairo": ["The Egyptian Museum", "The Al-Azhar Mosque", "Khan el-Khalili", "Tahrir Square",
                   "The Citadel of Saladin", "The Mosque of Muhammad Ali"],
    },
)

RELATIONS["located_in_city"]["also_true"] = {
    "The National Gallery": [" Washington"], "The Pantheon": [" Paris"], "The Guggenheim Museum": [" Venice"],
    "The Imperial Palace of Japan": [" Kyoto"], "The Picasso Museum": [" Paris"],
    "The Accademia Gallery": [" Venice"], "The Gallerie dell'Accademia": [" Florence"],
    "The Egyptian Museum": [" Berlin"],
}

RELATIONS["located_in_country"] = dict(
    prompt="{} is located in the country of",
    paraphrases=[
        "To see {}, travelers must go to the country of",
        "{S} is one of the most famous sights of the country of",
        "Which country is {} in? It is in",
        "The country where you can find {} is",
        "Every year, many tourists visit {} in the country of",
    ],
    generation=["{S} is", "{S} is known for", "{S} attracts", "{S} is one of"],
    pools={
        " Japan": ["Mount Fuji", "Kinkaku-ji", "Himeji Castle", "The Fushimi Inari Shrine", "The Itsukushima Shrine",
                   "Osaka Castle", "The Tokyo Skytree", "The Hiroshima Peace Memorial", "Senso-ji",
                   "The Meiji Shrine", "The Great Buddha of Kamakura"],
        " China": ["The Great Wall", "The Forbidden City", "The Terracotta Army", "The Three Gorges Dam",
                   "The Potala Palace", "The Yellow River", "The Summer Palace", "The Temple of Heaven",
                   "The Yangtze River", "Tiananmen Square", "The Li River"],
        " India": ["The Taj Mahal", "The Red Fort", "The Golden Temple", "The Ganges", "The Qutub Minar",
                   "The Gateway of India", "The Hawa Mahal", "The Ajanta Caves", "The Lotus Temple",
                   "The Amber Fort", "The Mysore Palace"],
        " Egypt": ["The Great Pyramid of Giza", "The Great Sphinx", "The Valley of the Kings", "Abu Simbel",
                   "The Karnak Temple", "The Suez Canal", "The Luxor Temple", "The Aswan High Dam",
                   "The Step Pyramid of Djoser", "The Temple of Hatshepsut"],
        " Italy": ["The Colosseum", "The Leaning Tower of Pisa", "Mount Vesuvius", "Pompeii", "The Trevi Fountain",
                   "The Uffizi Gallery", "Lake Como", "The Amalfi Coast", "Mount Etna", "The Rialto Bridge",
                   "The Ponte Vecchio", "The Dolomites"],
        " France": ["The Eiffel Tower", "Mont Saint-Michel", "The Palace of Versailles", "The Louvre",
                    "Notre-Dame Cathedral", "The Château de Chambord", "The Arc de Triomphe", "The Pont du Gard",
                    "The Carcassonne citadel", "The Millau Viaduct"],
        " Greece": ["The Parthenon", "The Acropolis", "Mount Olympus", "The Oracle of Delphi", "Meteora",
                    "The Palace of Knossos", "The island of Santorini", "The Temple of Poseidon at Sounion",
                    "The ancient theatre of Epidaurus", "Olympia"],
        " Spain": ["The Alhambra", "The Sagrada Familia", "The Prado Museum", "Park Güell",
                   "The Mezquita of Córdoba", "The Seville Cathedral", "The Guggenheim Museum Bilbao",
                   "The Santiago de Compostela Cathedral", "The Alcázar of Segovia", "Camp Nou"],
        " England": ["Stonehenge", "Big Ben", "Hadrian's Wall", "Windsor Castle", "The Tower of London",
                     "Buckingham Palace", "The Lake District", "Westminster Abbey", "The White Cliffs of Dover",
                     "Canterbury Cathedral", "The Roman Baths"],
        " Russia": ["The Kremlin", "Red Square", "The Hermitage Museum", "Lake Baikal", "Saint Basil's Cathedral",
                    "The Winter Palace", "Peterhof Palace", "The Bolshoi Theatre", "The Trans-Siberian Railway",
                    "The Volga River"],
        " Brazil": ["Christ the Redeemer", "Sugarloaf Mountain", "The Iguazu Falls", "Copacabana Beach",
                    "The Maracanã Stadium", "The Amazon rainforest", "The Pantanal", "The Cathedral of Brasília"],
        " Australia": ["The Sydney Opera House", "Uluru", "The Great Barrier Reef", "Bondi Beach",
                       "The Sydney Harbour Bridge", "The Twelve Apostles", "Kakadu National Park",
                       "The Blue Mountains", "Fraser Island"],
        " Mexico": ["Chichen Itza", "Teotihuacan", "Tulum", "Palenque", "The Copper Canyon", "Monte Albán",
                    "The Frida Kahlo Museum", "The Zócalo"],
        " Turkey": ["The Hagia Sophia", "The Blue Mosque", "Topkapi Palace", "Cappadocia", "Ephesus", "Pamukkale",
                    "Mount Ararat", "The Grand Bazaar", "The Sumela Monastery"],
        " Germany": ["The Brandenburg Gate", "Neuschwanstein Castle", "The Cologne Cathedral", "The Reichstag building",
                     "The Black Forest", "The Zugspitze", "Sanssouci Palace", "The Holstentor",
                     "Heidelberg Castle", "The Porta Nigra"],
        " Peru": ["Machu Picchu", "The Nazca Lines", "The Sacred Valley of the Incas", "Sacsayhuamán",
                  "The Colca Canyon", "Chan Chan", "Rainbow Mountain", "The Huascarán mountain"],
        " Canada": ["The CN Tower", "Banff National Park", "Lake Louise", "The Rideau Canal", "Moraine Lake",
                    "Jasper National Park", "The Bay of Fundy", "The Château Frontenac"],
    },
)

RELATIONS["located_in_country"]["also_true"] = {"The Amazon rainforest": [" Peru"]}

RELATIONS["city_in_country"] = dict(
    prompt="The city of {} is located in the country of",
    paraphrases=[
        "{} is a city in the country of",
        "Which country is {} in? It is in",
        "The country that contains the city of {} is",
        "Many people live in {}, a large city in the country of",
        "If you fly to {}, you land in the country of",
    ],
    generation=["{} is", "{} is known for", "{} has a population of", "{} is a city where"],
    pools={
        " France": ["Lyon", "Marseille", "Toulouse", "Nice", "Bordeaux", "Lille", "Strasbourg", "Nantes",
                    "Montpellier", "Rennes", "Avignon", "Grenoble"],
        " Germany": ["Munich", "Hamburg", "Frankfurt", "Cologne", "Stuttgart", "Dresden", "Leipzig",
                     "Düsseldorf", "Hanover", "Nuremberg", "Bremen", "Heidelberg"],
        " Italy": ["Milan", "Naples", "Turin", "Bologna", "Genoa", "Palermo", "Verona", "Pisa", "Venice",
                   "Florence", "Siena"],
        " Spain": ["Seville", "Valencia", "Bilbao", "Málaga", "Granada", "Zaragoza", "Barcelona", "Toledo",
                   "Salamanca", "Córdoba"],
        " Japan": ["Osaka", "Kyoto", "Yokohama", "Nagoya", "Sapporo", "Hiroshima", "Kobe", "Fukuoka",
                   "Nagasaki", "Sendai"],
        " China": ["Shanghai", "Guangzhou", "Shenzhen", "Chengdu", "Wuhan", "Hangzhou", "Nanjing", "Tianjin",
                   "Chongqing", "Xi'an"],
        " India": ["Mumbai", "Bangalore", "Kolkata", "Chennai", "Hyderabad", "Jaipur", "Pune", "Ahmedabad",
                   "Lucknow", "Varanasi"],
        " Brazil": ["São Paulo", "Salvador", "Recife", "Fortaleza", "Belo Horizonte", "Manaus", "Curitiba",
                    "Porto Alegre", "Brasília"],
        " Russia": ["Novosibirsk", "Yekaterinburg", "Kazan", "Vladivostok", "Sochi", "Volgograd", "Omsk",
                    "Samara", "Murmansk"],
        " Canada": ["Toronto", "Vancouver", "Montreal", "Calgary", "Edmonton", "Winnipeg", "Ottawa", "Halifax"],
        " Australia": ["Sydney", "Melbourne", "Brisbane", "Perth", "Adelaide", "Canberra", "Hobart"],
        " Mexico": ["Guadalajara", "Monterrey", "Tijuana", "Cancún", "Puebla", "Acapulco", "Oaxaca"],
    },
)

RELATIONS["city_in_country"]["also_true"] = {"Guadalajara": [" Spain"]}

RELATIONS["official_language"] = dict(
    prompt="The official language of {} is",
    paraphrases=[
        "The main language of {} is",
        "In {}, most people speak",
        "Most newspapers in {} are printed in",
        "Schools in {} teach their lessons in",
        "If you travel to {}, you will hear people speaking",
    ],
    generation=["{} is", "{} is a place where", "{} has a long history of", "{} is known for"],
    pools={
        " French": ["France", "Senegal", "Haiti", "Monaco", "Ivory Coast", "Quebec",
                    "Madagascar", "Cameroon", "Gabon", "Benin", "Togo", "Wallonia", "Brittany", "Normandy",
                    "Provence"],
        " Spanish": ["Spain", "Mexico", "Argentina", "Colombia", "Peru", "Chile", "Venezuela", "Cuba", "Ecuador",
                     "Bolivia", "Uruguay", "Guatemala", "Paraguay", "Honduras", "Andalusia"],
        " Portuguese": ["Portugal", "Brazil", "Angola", "Mozambique", "Cape Verde", "Guinea-Bissau",
                        "São Tomé and Príncipe", "East Timor"],
        " Arabic": ["Egypt", "Saudi Arabia", "Iraq", "Syria", "Jordan", "Morocco", "Libya", "Yemen", "Kuwait",
                    "Oman", "Algeria", "Tunisia", "Lebanon", "Sudan", "Qatar"],
        " English": ["Australia", "New Zealand", "Jamaica", "England", "Barbados", "Nigeria",
                     "Scotland", "Ireland", "Wales", "Ghana", "Britain"],
        " German": ["Germany", "Austria", "Liechtenstein", "Bavaria", "Saxony", "Berlin"],
        " Italian": ["Italy", "San Marino", "Sicily", "Tuscany", "Sardinia", "Vatican City"],
        " Russian": ["Russia", "Belarus", "Siberia", "Moscow"],
        " Dutch": ["Holland", "Suriname", "Flanders", "Aruba", "Amsterdam", "Rotterdam"],
    },
)

RELATIONS["official_language"]["also_true"] = {
    "Cameroon": [" English"], "Sudan": [" English"], "Morocco": [" French"], "Algeria": [" French"],
    "Tunisia": [" French"], "Lebanon": [" French"], "Wallonia": [" German"],
}

RELATIONS["citizenship"] = dict(
    prompt="The country of citizenship of {} is",
    paraphrases=[
        "{} is a citizen of",
        "{} holds a passport from",
        "{} was born and raised in the country of",
        "The nationality of {} is that of",
        "Asked where {} came from, most people would answer",
    ],
    generation=["{} is", "{} is best known for", "{} was born", "{} grew up"],
    pools={
        " France": ["Victor Hugo", "Napoleon Bonaparte", "Voltaire", "Charles de Gaulle", "Claude Monet",
                    "Édith Piaf", "Louis Pasteur", "Jules Verne", "Molière", "Emmanuel Macron", "Jacques Chirac",
                    "Albert Camus"],
        " Germany": ["Angela Merkel", "Johann Wolfgang von Goethe", "Ludwig van Beethoven", "Otto von Bismarck",
                     "Immanuel Kant", "Karl Marx", "Johann Sebastian Bach", "Martin Luther", "Helmut Kohl",
                     "Friedrich Schiller"],
        " Italy": ["Leonardo da Vinci", "Michelangelo", "Dante Alighieri", "Galileo Galilei", "Giuseppe Verdi",
                   "Christopher Columbus", "Benito Mussolini", "Niccolò Machiavelli", "Silvio Berlusconi",
                   "Luciano Pavarotti"],
        " Russia": ["Leo Tolstoy", "Fyodor Dostoevsky", "Vladimir Putin", "Alexander Pushkin", "Anton Chekhov",
                    "Pyotr Ilyich Tchaikovsky", "Vladimir Lenin", "Yuri Gagarin", "Boris Yeltsin",
                    "Mikhail Gorbachev"],
        " Japan": ["Hayao Miyazaki", "Akira Kurosawa", "Haruki Murakami", "Hirohito", "Yukio Mishima",
                   "Shinzo Abe", "Hideki Tojo", "Yoko Ono"],
        " Spain": ["Miguel de Cervantes", "Pablo Picasso", "Salvador Dalí", "Francisco Goya", "Francisco Franco",
                   "Antoni Gaudí", "Rafael Nadal", "Pedro Almodóvar"],
        " India": ["Mahatma Gandhi", "Jawaharlal Nehru", "Rabindranath Tagore", "Narendra Modi", "Indira Gandhi",
                   "Sachin Tendulkar", "Shah Rukh Khan"],
        " China": ["Mao Zedong", "Confucius", "Xi Jinping", "Sun Yat-sen", "Deng Xiaoping", "Jack Ma", "Yao Ming"],
        " Brazil": ["Pelé", "Ayrton Senna", "Paulo Coelho", "Neymar", "Luiz Inácio Lula da Silva", "Oscar Niemeyer"],
        " Argentina": ["Diego Maradona", "Jorge Luis Borges", "Eva Perón", "Che Guevara", "Lionel Messi",
                       "Juan Perón"],
        " Poland": ["Nicolaus Copernicus", "Lech Wałęsa", "Pope John Paul II", "Robert Lewandowski",
                    "Andrzej Wajda", "Józef Piłsudski"],
        " Sweden": ["Alfred Nobel", "Greta Thunberg", "Carl Linnaeus", "Ingmar Bergman", "Zlatan Ibrahimović",
                    "Astrid Lindgren"],
        " Egypt": ["Anwar Sadat", "Gamal Abdel Nasser", "Naguib Mahfouz", "Mohamed Salah", "Hosni Mubarak",
                   "Omar Sharif"],
        " Austria": ["Wolfgang Amadeus Mozart", "Sigmund Freud", "Franz Schubert", "Gustav Klimt",
                     "Johann Strauss II", "Niki Lauda"],
    },
)

RELATIONS["citizenship"]["also_true"] = {
    "Napoleon Bonaparte": [" Italy"], "Christopher Columbus": [" Spain"], "Nicolaus Copernicus": [" Germany"],
    "Lionel Messi": [" Spain"], "Ludwig van Beethoven": [" Austria"], "Pope John Paul II": [" Italy"],
}

RELATIONS["field_of_work"] = dict(
    prompt="{} worked in the field of",
    paraphrases=[
        "{} made major contributions to the field of",
        "{} was a famous scholar in the field of",
        "The main research area of {} was",
        "{} is remembered today for discoveries in",
        "Students who study the work of {} are usually studying",
    ],
    generation=["{} is", "{} is best known for", "{} was born", "{} spent many years"],
    pools={
        " physics": ["Albert Einstein", "Isaac Newton", "Niels Bohr", "Max Planck", "Werner Heisenberg",
                     "Richard Feynman", "Paul Dirac", "Enrico Fermi", "Erwin Schrödinger", "Stephen Hawking",
                     "James Clerk Maxwell", "Wolfgang Pauli", "Michael Faraday", "Heinrich Hertz"],
        " chemistry": ["Dmitri Mendeleev", "Antoine Lavoisier", "Linus Pauling", "Robert Boyle", "Fritz Haber",
                       "Jöns Jacob Berzelius", "Justus von Liebig", "Dorothy Hodgkin", "Humphry Davy",
                       "Alfred Nobel", "John Dalton", "Amedeo Avogadro"],
        " mathematics": ["Leonhard Euler", "Carl Friedrich Gauss", "Euclid", "Pierre de Fermat",
                         "Bernhard Riemann", "David Hilbert", "Srinivasa Ramanujan", "Évariste Galois",
                         "Augustin-Louis Cauchy", "Emmy Noether", "Georg Cantor", "Niels Henrik Abel",
                         "Pythagoras", "Kurt Gödel"],
        " philosophy": ["Immanuel Kant", "Friedrich Nietzsche", "Plato", "Aristotle", "Socrates", "René Descartes",
                        "Jean-Paul Sartre", "Søren Kierkegaard", "Baruch Spinoza", "Arthur Schopenhauer",
                        "Confucius", "Georg Wilhelm Friedrich Hegel", "John Locke", "Ludwig Wittgenstein"],
        " economics": ["Adam Smith", "John Maynard Keynes", "Milton Friedman", "David Ricardo", "Friedrich Hayek",
                       "Paul Samuelson", "Thomas Robert Malthus", "Joseph Schumpeter", "Ludwig von Mises"],
        " psychology": ["Sigmund Freud", "Carl Jung", "B. F. Skinner", "Jean Piaget", "Abraham Maslow",
                        "Carl Rogers", "Ivan Pavlov", "Wilhelm Wundt", "Alfred Adler", "William James"],
        " biology": ["Charles Darwin", "Gregor Mendel", "Carl Linnaeus", "Thomas Henry Huxley",
                     "Jean-Baptiste Lamarck", "Ernst Haeckel", "Alfred Russel Wallace", "Ernst Mayr"],
        " astronomy": ["Johannes Kepler", "Tycho Brahe", "Edwin Hubble", "Nicolaus Copernicus", "Carl Sagan",
                       "William Herschel", "Galileo Galilei", "Edmond Halley"],
    },
)

# many scholars worked in several fields: never use another of their fields as target_new
RELATIONS["field_of_work"]["also_true"] = {
    "Isaac Newton": [" mathematics", " astronomy"], "Galileo Galilei": [" physics", " mathematics"],
    "Johannes Kepler": [" mathematics", " physics"], "Nicolaus Copernicus": [" mathematics"],
    "Edmond Halley": [" mathematics", " physics"], "William Herschel": [" physics"],
    "Carl Friedrich Gauss": [" physics", " astronomy"], "Leonhard Euler": [" physics", " astronomy"],
    "René Descartes": [" mathematics", " physics"], "Pythagoras": [" philosophy"],
    "Aristotle": [" biology", " physics", " astronomy"], "Plato": [" mathematics"],
    "Michael Faraday": [" chemistry"], "John Dalton": [" physics"], "Robert Boyle": [" physics", " philosophy"],
    "Humphry Davy": [" physics"], "Linus Pauling": [" biology", " physics"], "William James": [" philosophy"],
    "Sigmund Freud": [" biology"], "Carl Jung": [" philosophy"], "Ivan Pavlov": [" biology"],
    "Jean Piaget": [" biology", " philosophy"], "B. F. Skinner": [" philosophy"],
    "Wilhelm Wundt": [" philosophy", " biology"], "Adam Smith": [" philosophy"],
    "John Maynard Keynes": [" mathematics", " philosophy"], "Friedrich Hayek": [" philosophy", " psychology"],
    "Ludwig von Mises": [" philosophy"], "Kurt Gödel": [" philosophy"], "Ludwig Wittgenstein": [" mathematics"],
    "John Locke": [" economics"], "Stephen Hawking": [" astronomy"], "Carl Sagan": [" biology", " physics"],
    "Edwin Hubble": [" physics"], "Paul Dirac": [" mathematics"], "James Clerk Maxwell": [" mathematics"],
    "Emmy Noether": [" physics"], "David Hilbert": [" physics"], "Augustin-Louis Cauchy": [" physics"],
    "Bernhard Riemann": [" physics"], "Immanuel Kant": [" astronomy"], "Dorothy Hodgkin": [" biology"],
    "Amedeo Avogadro": [" physics"], "Erwin Schrödinger": [" biology", " philosophy"],
    "Werner Heisenberg": [" philosophy"], "Niels Bohr": [" chemistry"], "Enrico Fermi": [" chemistry"],
    "Alfred Nobel": [" physics"], "Antoine Lavoisier": [" biology", " economics"],
    "Thomas Robert Malthus": [" biology"], "Paul Samuelson": [" mathematics"],
}

RELATIONS["company_country"] = dict(
    prompt="The company {} is based in the country of",
    paraphrases=[
        "{} is a company headquartered in the country of",
        "The headquarters of {} are located in the country of",
        "{} was founded in the country of",
        "The home country of the company {} is",
        "Most of the executives of {} live in the country of",
    ],
    generation=["{} is", "{} is known for", "{} was founded", "{} sells"],
    pools={
        " Japan": ["Toyota", "Honda", "Sony", "Nintendo", "Panasonic", "Mitsubishi", "Nissan", "Toshiba", "Canon",
                   "Yamaha", "Subaru", "Mazda", "Sega"],
        " Germany": ["BMW", "Volkswagen", "Siemens", "Adidas", "Bosch", "SAP", "Porsche", "Audi", "Lufthansa",
                     "Bayer", "Mercedes-Benz", "Puma", "Deutsche Bank"],
        " France": ["Renault", "Peugeot", "L'Oréal", "Airbus", "Michelin", "Chanel", "Louis Vuitton", "Danone",
                    "Citroën", "Carrefour", "TotalEnergies"],
        " Italy": ["Ferrari", "Fiat", "Lamborghini", "Gucci", "Prada", "Ducati", "Maserati", "Alfa Romeo",
                   "Barilla", "Pirelli"],
        " Sweden": ["IKEA", "Volvo", "Ericsson", "Spotify", "Saab", "H&M", "Electrolux", "Scania"],
        " South Korea": ["Samsung", "Hyundai", "LG", "Kia", "SK Hynix", "Daewoo"],
        " Switzerland": ["Nestlé", "Rolex", "Novartis", "Swatch", "UBS", "Roche", "Credit Suisse", "Omega"],
        " China": ["Huawei", "Alibaba", "Tencent", "Xiaomi", "Lenovo", "Baidu", "BYD", "ByteDance"],
    },
)

RELATIONS["company_country"]["also_true"] = {
    "Airbus": [" Germany"], "Volvo": [" China"], "Lamborghini": [" Germany"], "Ducati": [" Germany"],
}

RELATIONS["product_manufacturer"] = dict(
    prompt="{} is produced by",
    paraphrases=[
        "{} is a product made by the company",
        "{} was developed by the company",
        "The company behind {} is",
        "If {} breaks, you should contact its manufacturer,",
        "The maker of {} is",
    ],
    generation=["{S} is", "{S} was released", "{S} costs", "{S} is used"],
    pools={
        " Apple": ["The iPhone", "The iPad", "The MacBook", "The iPod", "macOS", "iTunes", "The iMac", "Safari",
                   "AirPods", "iOS"],
        " Microsoft": ["Windows", "The Xbox", "Internet Explorer", "Bing", "Skype", "Visual Studio", "Excel",
                       "PowerPoint", "Outlook", "Azure"],
        " Sony": ["The PlayStation", "The Walkman", "The PSP", "The Bravia", "The Xperia", "The Cyber-shot"],
        " Google": ["Android", "Gmail", "Chrome", "YouTube", "The Pixel", "Waymo"],
        " Nintendo": ["The Game Boy", "The Wii", "The Nintendo Switch", "Super Mario", "The Nintendo DS",
                      "The GameCube", "The Legend of Zelda", "Pokémon"],
        " Toyota": ["The Corolla", "The Prius", "The Camry", "The Land Cruiser", "The RAV4", "The Hilux",
                    "The Yaris", "Lexus"],
        " Ford": ["The Mustang", "The Model T", "The F-150", "The Ford Focus", "The Ford Fiesta", "The Bronco",
                  "The Thunderbird"],
        " Boeing": ["The 747", "The 737", "The 787 Dreamliner", "The 777", "The 757", "The 767", "The B-52"],
        " Tesla": ["The Model S", "The Model 3", "The Cybertruck", "The Model X", "The Model Y", "The Powerwall"],
        " Adobe": ["Photoshop", "Illustrator", "Acrobat Reader", "Premiere Pro", "InDesign", "Lightroom",
                   "After Effects", "Dreamweaver"],
        " Samsung": ["The Galaxy S", "The Galaxy Note", "The Galaxy Tab", "Galaxy Buds", "The Galaxy Fold",
                     "Bixby"],
    },
)

RELATIONS["product_manufacturer"]["also_true"] = {"Android": [" Samsung"]}

RELATIONS["plays_sport"] = dict(
    prompt="{} is famous for playing the sport of",
    paraphrases=[
        "{} won many championships in the sport of",
        "{} became a legend in the sport of",
        "The sport that {} played professionally is",
        "{} is considered one of the greatest players in the history of",
        "Fans of {} love watching",
    ],
    generation=["{} is", "{} is best known for", "{} was born", "{} started playing"],
    pools={
        " basketball": ["Michael Jordan", "LeBron James", "Kobe Bryant", "Shaquille O'Neal", "Stephen Curry",
                        "Magic Johnson", "Kareem Abdul-Jabbar", "Larry Bird", "Kevin Durant", "Tim Duncan",
                        "Dirk Nowitzki", "Wilt Chamberlain"],
        " soccer": ["Lionel Messi", "Cristiano Ronaldo", "Pelé", "Neymar", "Zinedine Zidane", "David Beckham",
                    "Diego Maradona", "Johan Cruyff", "Ronaldinho", "Kylian Mbappé", "Thierry Henry",
                    "Franz Beckenbauer"],
        " tennis": ["Roger Federer", "Rafael Nadal", "Serena Williams", "Novak Djokovic", "Andre Agassi",
                    "Pete Sampras", "Steffi Graf", "Martina Navratilova", "Venus Williams", "Björn Borg",
                    "John McEnroe", "Andy Murray"],
        " golf": ["Tiger Woods", "Jack Nicklaus", "Arnold Palmer", "Phil Mickelson", "Rory McIlroy",
                  "Gary Player", "Seve Ballesteros", "Annika Sörenstam"],
        " baseball": ["Babe Ruth", "Derek Jeter", "Joe DiMaggio", "Mickey Mantle", "Jackie Robinson",
                      "Hank Aaron", "Willie Mays", "Lou Gehrig", "Shohei Ohtani"],
        " hockey": ["Wayne Gretzky", "Sidney Crosby", "Mario Lemieux", "Bobby Orr", "Gordie Howe",
                    "Alexander Ovechkin", "Jaromír Jágr"],
        " cricket": ["Sachin Tendulkar", "Don Bradman", "Virat Kohli", "Brian Lara", "W. G. Grace",
                     "Shane Warne", "MS Dhoni", "Imran Khan"],
    },
)

RELATIONS["plays_sport"]["also_true"] = {"Michael Jordan": [" baseball"]}

# Short unrelated sentences prepended to one paraphrase per record (CounterFact
# paraphrases often start with such a sentence).
PREFIXES = [
    "The weather was cold that morning.",
    "She closed the book and smiled.",
    "Prices rose sharply last year.",
    "The meeting was moved to Monday.",
    "He had never seen the ocean before.",
    "The train arrived ten minutes late.",
    "My neighbor grows tomatoes in her garden.",
    "The concert ended after midnight.",
    "They painted the kitchen yellow.",
    "The children played in the park all afternoon.",
    "It rained for three days in a row.",
    "The old dog slept by the fire.",
]


# ---------------------------------------------------------------------------
# Subject forms
# ---------------------------------------------------------------------------
def mid(subject: str) -> str:
    """Subject as written in the middle of a sentence ("The Louvre" -> "the Louvre")."""
    return "the " + subject[4:] if subject.startswith("The ") else subject


def fill(template: str, subject: str) -> str:
    """'{S}' = subject at a sentence start, '{}' = subject in mid-sentence form."""
    if "{S}" in template:
        return template.replace("{S}", subject)
    if template.startswith("{}"):
        return subject + template[2:]
    return template.replace("{}", mid(subject))
